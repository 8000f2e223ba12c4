import Bus
import Foundation
import Model
import Store
import TestSupport

/// `tracker-bench retention [DEVICES] [ROUNDS] [TOTAL]`: a month of a fleet
/// compressed in time, through the gateway and the filter. Every round each
/// of DEVICES devices sends one fix; the rounds' fix times span the 30 days
/// up to now (a fleet at one fix every 5 s sends 518,400 a device in a month:
/// each round stands for many). The logs' totals are TOTAL (the gateway's
/// `ringTotalCapacity`, the filter's `retentionTotal`) instead of 5,000,000,
/// scaled down as the month is. After every sixth of the rounds: each store's
/// rows and its size on disk. Bounded storage shows as sizes that stop
/// growing once the totals are reached.
enum RetentionBench {
    static func run(devices: Int, rounds: Int, total: Int) async throws {
        let common: [String: Any] = ["logLevel": "warning", "healthIntervalSec": 1]
        let services = try await GatewayAndFilter.start(gateway: common.merging(["ringTotalCapacity": total, "ringCapacity": 1_000]) { $1 },
                                                        filter: common.merging(["retentionTotal": total, "retentionPerDevice": 100]) { $1 })
        defer { services.stop() }
        let publisher = try await TestClient.connect(port: services.broker.port)
        let monthMs: Int64 = 30 * 86_400_000
        let startMs = Int64(Date().timeIntervalSince1970 * 1000) - monthMs
        print(String(format: "%d devices, %d rounds over 30 days (a round every %.1f h), log totals %d", devices, rounds,
                     Double(monthMs) / Double(rounds) / 3_600_000, total))
        var sent = 0
        for round in 0..<rounds {
            let t = Double(startMs + monthMs * Int64(round) / Int64(rounds)) / 1000
            for device in 0..<devices {
                let fix = #"{"t":\#(t),"lat":\#(48.1 + Double(device % 1000) * 1e-3 + Double(round % 50) * 1e-4),"lon":\#(11.5 + Double(device / 1000) * 1e-3),"acc":8,"speed":1.2,"course":90}"#
                while publisher.inFlight > 5_000 { await Task.yield() }
                try publisher.publish(MQTTMessage(topic: "tracker/r\(device)/fixes", string: fix))
                sent += 1
            }
            guard (round + 1) % max(1, rounds / 6) == 0 || round == rounds - 1 else { continue }
            await publisher.drain(timeout: .seconds(600))
            try await services.waitJudged(Int64(sent))
            let day = Double(round + 1) / Double(rounds) * 30
            print(String(format: "day %4.1f, %8d fixes:", day, sent), try describe(services.gateway, tables: ["raw_fixes", "sessions"]),
                  "|", try describe(services.filter, tables: ["decisions", "judged", "points"]))
        }
    }

    /// The store's rows per table and its files' size (the WAL included).
    static func describe(_ service: ServiceHarness, tables: [String]) throws -> String {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: service.dataDir.path)) ?? []
        let bytes = files.filter { $0.contains(".sqlite") }.reduce(0) { sum, file in
            sum + ((try? FileManager.default.attributesOfItem(atPath: service.dataDir.appendingPathComponent(file).path)[.size] as? Int) ?? 0)
        }
        guard let store = files.first(where: { $0.hasSuffix(".sqlite") }) else { return "no store" }
        let db = try Database(path: service.dataDir.appendingPathComponent(store).path, readOnly: true)
        let counts = try tables.map { table in "\(table) \(try db.first("SELECT count(*) FROM \(table)") { $0.int(0) } ?? 0)" }
        return String(format: "%@ %.1f MB (%@)", (service.executable as NSString).lastPathComponent as NSString, Double(bytes) / 1e6, counts.joined(separator: ", ") as NSString)
    }
}
