import Bus
import Foundation
import Model
import Store
import TestSupport

/// `tracker-bench retention [DEVICES] [ROUNDS] [TOTAL]`: a month of a fleet
/// compressed in time, through the whole constellation. Every round each of
/// DEVICES devices sends one fix; the rounds' fix times span the 30 days up
/// to now (a fleet at one fix every 5 s sends 518,400 a device in a month:
/// each round stands for many). Rounds alternate between a fleet fence and a
/// place 2 km away, so every round is a crossing and motion has trips and
/// stops to keep. Every store's totals are TOTAL instead of their defaults
/// (millions), scaled down as the month is. After every sixth of the rounds:
/// each store's rows per table and its size on disk. Bounded storage shows as
/// sizes that stop growing once the totals are reached.
enum RetentionBench {
    /// Each service's tables, as the bench reports them.
    static let tables: [(service: String, tables: [String])] = [
        ("gateway", ["raw_fixes", "sessions"]), ("filter", ["judgements", "points"]),
        ("motion", ["motion", "crossings", "trips", "stops"]), ("track", ["points"]), ("uploader", ["queue"]),
    ]

    static func run(devices: Int, rounds: Int, total: Int) async throws {
        let common: [String: Any] = ["logLevel": "warning", "healthIntervalSec": 1]
        let config: [String: [String: Any]] = [
            "gateway": ["ringTotalCapacity": total, "ringCapacity": 1_000, "sessionsTotal": total, "sessionsPerDevice": 1_000],
            "filter": ["retentionTotal": total, "retentionPerDevice": 100, "cacheBudgetMB": ProcessInfo.processInfo.environment["FILTER_BUDGET"].flatMap(Int.init) ?? 8],
            "motion": ["retentionTotal": total, "retentionPerDevice": 100, "historyTotal": total, "historyPerDevice": 1_000],
            "track": ["maxPointsTotal": total, "maxPointsPerDevice": 1_000],
            "uploader": [:],
        ]
        // RETENTION_BEFORE=1 with TRACKER_BIN_DIR: the build before these settings existed, on the same bench.
        let before = ProcessInfo.processInfo.environment["RETENTION_BEFORE"] != nil
        let newer: Set<String> = ["sessionsTotal", "sessionsPerDevice", "historyTotal", "historyPerDevice", "maxPointsTotal"]
        let constellation = try Constellation(config: config.mapValues { settings in
            settings.merging(common) { own, _ in own }.filter { !before || !newer.contains($0.key) && !($0.key == "retentionTotal" && settings["historyTotal"] != nil) }
        })
        try await constellation.start()
        defer { constellation.stop() }
        let client = try await constellation.operatorClient()
        _ = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
            "url": .string(constellation.sinkURL), "batchSize": .number(500)]))
        _ = try await TestClient.command(client, device: "_fleet", "addGeofence", args: .object([
            "id": .string("depot"), "latitude": .number(48.1), "longitude": .number(11.5), "radiusM": .number(500)]))
        let monthMs: Int64 = 30 * 86_400_000
        let startMs = Int64(Date().timeIntervalSince1970 * 1000) - monthMs
        print(String(format: "%d devices, %d rounds over 30 days (a round every %.1f h), every store's totals %d", devices, rounds,
                     Double(monthMs) / Double(rounds) / 3_600_000, total))
        var sent = 0
        for round in 0..<rounds {
            let t = Double(startMs + monthMs * Int64(round) / Int64(rounds)) / 1000
            // At the depot (within 100 m of its centre) on even rounds, 2.2 km north on odd ones.
            let away = round % 2 == 1 ? 0.02 : 0
            for device in 0..<devices {
                let lat = 48.1 + away + Double(device % 100) * 1e-5, lon = 11.5 + Double(device / 100 % 100) * 1e-5
                let fix = #"{"t":\#(t),"lat":\#(lat),"lon":\#(lon),"acc":8}"#
                try await client.publish(inFlightBelow: 2_000, MQTTMessage(topic: "tracker/r\(device)/fixes", string: fix))
                sent += 1
            }
            guard (round + 1) % max(1, rounds / 6) == 0 || round == rounds - 1 else { continue }
            await client.drain(timeout: .seconds(600))
            let judged = try await constellation.waitJudged(Int64(sent), timeout: 1_800)
            let accepted = judged.counters?["accepted"] ?? 0
            try await constellation.waitHealth("track", timeout: 1_800, description: "every point stored") { $0.processed >= accepted }
            try await constellation.waitHealth("uploader", timeout: 1_800, description: "every point delivered") {
                $0.processed >= accepted && $0.queueDepth == 0
            }
            print(String(format: "day %4.1f, %8d fixes, %8lld accepted:", Double(round + 1) / Double(rounds) * 30, sent, accepted))
            if ProcessInfo.processInfo.environment["RETENTION_COUNTERS"] != nil { print("  filter counters:", (judged.counters ?? [:]).sorted { $0.key < $1.key }) }
            for (service, tables) in tables {
                let health = try await constellation.waitHealth(service, timeout: 30, description: "\(service)'s health") { _ in true }
                let capped = health.counters?["logsCapped"] ?? 0
                print("  ", try describe(constellation.services[service]!, tables: tables), capped > 0 ? "logs held to their totals \(capped) times" : "")
            }
        }
        await client.disconnect()
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
