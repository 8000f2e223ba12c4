import Bus
import Foundation
import Model
import TestSupport

/// `tracker-bench repair [N]`: what gap repair costs and how fast it is.
/// - Steady state: N fixes of noisy drives through the whole constellation
///   until the track store has every accepted point, this build against the
///   build in `TRACKER_BASELINE_BIN` (alternating, three runs each), and the
///   repair requests the run made (none: no gap, no round trip).
/// - A repair: the broker forgets 1,000 raw fixes queued for the filter (it
///   restarts without persistence while the filter is down); the next fix
///   shows the gap, and the time from it to the 1,001st verdict is the repair.
enum RepairBench {
    static func run(count: Int) async throws {
        let baseline = ProcessInfo.processInfo.environment["TRACKER_BASELINE_BIN"].map { URL(fileURLWithPath: $0) }
        var runs: [(name: String, seconds: Double)] = []
        for _ in 0..<3 {
            runs.append(("this build", try await steadyState(count: count, binaries: ServiceHarness.binaryDirectory)))
            if let baseline { runs.append(("baseline", try await steadyState(count: count, binaries: baseline))) }
        }
        func median(_ name: String) -> Double? {
            let times = runs.filter { $0.name == name }.map(\.seconds)
            return times.isEmpty ? nil : times.median
        }
        let mine = median("this build")!
        print(String(format: "steady state, %d fixes end to end to the track store: this build %@ s, median %.2f s (%.0f fixes/s)", count,
                     runs.filter { $0.name == "this build" }.map { String(format: "%.2f", $0.seconds) }.joined(separator: " / ") as NSString,
                     mine, Double(count) / mine))
        if let theirs = median("baseline") {
            print(String(format: "  baseline build %@ s, median %.2f s: this build's throughput is %.2f × the baseline's",
                         runs.filter { $0.name == "baseline" }.map { String(format: "%.2f", $0.seconds) }.joined(separator: " / ") as NSString,
                         theirs, theirs / mine))
        } else {
            print("  (set TRACKER_BASELINE_BIN to another build's bin directory to measure it in the same run)")
        }
        for missing in [1_000, 10_000] {
            let (seconds, repaired) = try await repair(missing: missing)
            print(String(format: "repair of %d raw fixes the broker forgot: %.2f s from the fix that showed the gap to its verdict (%lld repaired)",
                         missing, seconds, repaired))
        }
    }

    /// Seconds from the first fix in until the track service stored every accepted point.
    static func steadyState(count: Int, binaries: URL) async throws -> Double {
        let quiet: [String: Any] = ["logLevel": "warning", "healthIntervalSec": 0.5]
        let constellation = try Constellation(config: Dictionary(uniqueKeysWithValues: Constellation.services.map { ($0, quiet) }),
                                              binaryDirectory: binaries)
        try await constellation.start()
        defer { constellation.stop() }
        let client = try await constellation.operatorClient()
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let drives = (1...5).map { seed in Array(NoiseGenerator(seed: UInt64(seed)).apply(to: truth).prefix(1_600).map(\.fix)) }
        let start = ContinuousClock.now
        var sent = 0
        for round in 0..<1_600 where sent < count {
            for device in 0..<max(1, count / 1_600) where sent < count {
                try await client.publish(inFlightBelow: 2_000, MQTTMessage(topic: "tracker/steady\(device)/fixes", string: DemoRecording.line(drives[device % 5][round])))
                sent += 1
            }
        }
        await client.drain(timeout: .seconds(600))
        let judged = try await constellation.waitJudged(Int64(sent), timeout: 600)
        let accepted = judged.counters?["accepted"] ?? 0
        let stored = try await constellation.waitHealth("track", timeout: 600, description: "every point stored") { $0.processed >= accepted }
        let seconds = (ContinuousClock.now - start).seconds
        let requests = (judged.counters?["repairRequests"] ?? 0) + (stored.counters?["repairRequests"] ?? 0)
        if requests > 0 { print("  note: \(requests) repair requests in a run without broker trouble") }
        await client.disconnect()
        return seconds
    }

    /// The broker forgets `missing` raw fixes; seconds from the next fix to its verdict.
    static func repair(missing: Int) async throws -> (seconds: Double, repaired: Int64) {
        let broker = try TestBroker(persistent: false)
        let config: [String: Any] = ["logLevel": "warning", "healthIntervalSec": 0.2]
        let gateway = try ServiceHarness(executable: "tracker-gateway", broker: broker, config: config)
        let filter = try ServiceHarness(executable: "tracker-filter", broker: broker, config: config)
        try gateway.start()
        try filter.start()
        defer { _ = filter.stop(); _ = gateway.stop() }
        let device = "repair\(missing)"
        func fix(_ i: Int) -> MQTTMessage {
            MQTTMessage(topic: "tracker/\(device)/fixes", string: String(format: Throughput.fixTemplate, 1_700_000_000.0 + Double(i), 48.1 + Double(i) * 1e-5, 11.5))
        }
        var client = try await TestClient.connect(port: broker.port)
        try await broker.waitForHealth("gateway", timeout: 120, description: "gateway health") { $0.status == .online }
        try await broker.waitForHealth("filter", timeout: 120, description: "filter health") { $0.status == .online }
        try await client.publishAndWait(fix(0))
        try await waitVerdicts(client, device, 1)
        // The filter is away; its fixes queue at the broker, which then forgets them.
        _ = filter.stop()
        for i in 1...missing {
            try await client.publish(inFlightBelow: 1_000, fix(i))
        }
        await client.drain(timeout: .seconds(120))
        try await broker.waitForHealth("gateway", timeout: 120, description: "gateway health") { $0.processed >= Int64(missing + 1) && $0.queueDepth == 0 }
        await client.disconnect()
        try broker.restart(graceful: true)
        try filter.start()
        try await broker.waitForHealth("filter", timeout: 120, description: "filter health") { $0.status == .online }
        try await broker.waitForHealth("gateway", timeout: 120, description: "gateway health") { $0.status == .online }
        client = try await TestClient.connect(port: broker.port)
        let start = ContinuousClock.now
        try await client.publishAndWait(fix(missing + 1))
        try await waitVerdicts(client, device, missing + 2)
        let seconds = (ContinuousClock.now - start).seconds
        // The verdicts came through the repair, not by another way.
        let health = try await broker.waitForHealth("filter", timeout: 120, description: "filter health") { ($0.counters?["repaired"] ?? 0) >= Int64(missing) }
        await client.disconnect()
        return (seconds, health.counters?["repaired"] ?? 0)
    }

    static func waitVerdicts(_ client: MQTTClient, _ device: String, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            let reply = try await TestClient.command(client, device: device, "getDecisions", args: .object([
                "limit": .number(1), "offset": .number(Double(count - 1))]))
            if case .array(let rows)? = reply.result, !rows.isEmpty { return }
        }
        throw TestSupportError("\(device): fewer than \(count) verdicts within 120 s")
    }
}
