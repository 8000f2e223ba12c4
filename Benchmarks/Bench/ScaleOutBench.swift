import Bus
import Foundation
import Model
import TestSupport

/// `tracker-bench scale-out [N] [ROUNDS]`: the whole product as one
/// instance per service (as always: `partitions` 1), as one instance per
/// service with the devices in 16 partitions, and as two instances per
/// service over the same partitions, on fresh brokers, alternating for
/// ROUNDS rounds (2). Each run sends N fixes (20,000) of twenty noisy
/// drives as fast as the broker acknowledges, and is timed until every
/// service has taken what reached it and the sink holds every accepted
/// point; it prints fixes per second, each run's ratio to the first line
/// of its round (`SCALE_SETUPS` picks the lines), how many requests reached
/// the sink, and the CPU time per fix of every process (the
/// broker's included), which says what a fix costs wherever it runs: on a
/// machine with more cores, instances add capacity as long as that cost per
/// fix stays flat.
enum ScaleOutBench {
    struct Setup {
        let name: String
        let partitions: Int
        let instances: [String]
    }

    /// `SCALE_PARTITIONS=P`: the partitions of the partitioned lines (16).
    static func setups(partitions: Int) -> [Setup] {
        [Setup(name: "one instance each, unpartitioned", partitions: 1, instances: ["a"]),
         Setup(name: "one instance each, \(partitions) partitions", partitions: partitions, instances: ["a"]),
         Setup(name: "two instances each, \(partitions) partitions", partitions: partitions, instances: ["a", "b"])]
    }

    /// `SCALE_SETUPS=2,3`: only those lines (1-based), e.g. to profile one.
    static func chosen(_ setups: [Setup]) throws -> [Setup] {
        guard let text = ProcessInfo.processInfo.environment["SCALE_SETUPS"] else { return setups }
        let picked = text.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !picked.isEmpty, picked.allSatisfy({ $0.map { 1...setups.count ~= $0 } ?? false }) else {
            throw TestSupportError("SCALE_SETUPS: expected line numbers 1–\(setups.count) separated by commas, got '\(text)'")
        }
        return picked.map { setups[$0! - 1] }
    }

    static func run(count: Int, rounds: Int) async throws {
        let partitions = try environmentNumber("SCALE_PARTITIONS", minimum: 2) ?? 16
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let drives = (1...20).map { seed in Array(NoiseGenerator(seed: UInt64(seed)).apply(to: truth).dropFirst(700).map(\.fix)) }
        let perDevice = (count + 19) / 20
        guard perDevice <= drives.map(\.count).min()! else { throw TestSupportError("scale-out: at most \(20 * drives.map(\.count).min()!) fixes") }
        for round in 1...rounds {
            var baseline: (name: String, rate: Double)?
            for setup in try chosen(setups(partitions: partitions)) {
                let (rate, cpu) = try await measure(setup, drives: drives, perDevice: perDevice)
                baseline = baseline ?? (setup.name, rate)
                print(String(format: "round %d, %@: %.0f fixes/s (%.2f of %@); CPU per fix %@",
                             round, setup.name as NSString, rate, rate / baseline!.rate, baseline!.name as NSString, cpu as NSString))
            }
        }
    }

    static func measure(_ setup: Setup, drives: [[DeviceFix]], perDevice: Int) async throws -> (Double, String) {
        // Health every 0.2 s (the tests' interval), so the run is timed to a fifth of a second.
        let fleet = try ScaledConstellation(partitions: setup.partitions, config: ["logLevel": "warning"])
        defer { fleet.stopAll() }
        for name in setup.instances { try fleet.startAll(name) }
        let health = try await MessageCollector(port: fleet.broker.port, filters: ["tracker/_health/#"])
        defer { Task { await health.close() } }
        // Every service online, and partitioned ones sharing every partition
        // evenly: until then partitions move, and a handover within the
        // measured run would be timed as throughput.
        try await health.waitForNewestHealth(timeout: 60, description: "every instance online, the partitions shared evenly") { newest in
            let online = newest.values.filter { $0.status == .online }
            return ScaledConstellation.services.allSatisfy { service in
                let mine = online.filter { $0.service == service }
                guard mine.count == setup.instances.count else { return false }
                guard setup.partitions > 1 else { return true }
                // Every partition run, and the ingress (a command sent before its session subscribed is not kept).
                guard Set(mine.flatMap { $0.partitions ?? [] }).count == setup.partitions, mine.contains(where: { $0.ingress == true }) else { return false }
                // Each instance its share of the slots (the partitions and the
                // ingress), as `PartitionBoard.assign` deals them, and each slot run once.
                let slots = mine.map { ($0.partitions ?? []).count + ($0.ingress == true ? 1 : 0) }
                let share = (setup.partitions + 1) / mine.count
                return slots.reduce(0, +) == setup.partitions + 1 && slots.allSatisfy { (share...share + 1).contains($0) }
            }
        }
        let client = try await fleet.client()
        _ = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
            "url": .string(fleet.sinkURL), "batchSize": .number(500)]))
        // CPU time by process kind, a service's instances added up.
        func cpu() -> [String: Double] {
            var spent: [String: Double] = ["broker": (fleet.broker.cpu.map { $0.user + $0.system }) ?? 0,
                                           "sink": (fleet.sink?.cpu.map { $0.user + $0.system }) ?? 0]
            for service in ScaledConstellation.services {
                for name in setup.instances {
                    if let time = fleet.instances[service]?[name]?.process?.cpu { spent[service, default: 0] += time.user + time.system }
                }
            }
            return spent
        }
        // Made before the clock starts: the bench's own work shares the cores it measures.
        let messages = (0..<perDevice).flatMap { i in
            drives.enumerated().map { device, drive in MQTTMessage(topic: "tracker/scale\(device)/fixes", string: DemoRecording.line(drive[i])) }
        }
        let before = cpu()
        let start = ContinuousClock.now
        for message in messages { try await client.publish(inFlightBelow: 2_000, message) }
        await client.drain(timeout: .seconds(3_600))
        let total = Int64(perDevice * drives.count)
        @Sendable func sum(_ newest: [String: Health], _ service: String, _ value: (Health) -> Int64) -> Int64 {
            newest.values.filter { $0.service == service }.reduce(0) { $0 + value($1) }
        }
        // The filters took every fix, then motion, the track and the uploader every point the filters accepted.
        let published = (ContinuousClock.now - start).seconds
        let filtered = try await health.waitForNewestHealth(timeout: 3_600, description: "the filters took every fix") { sum($0, "filter", \.processed) >= total }
        let filteredAt = (ContinuousClock.now - start).seconds
        let accepted = sum(filtered, "filter") { $0.counters?["accepted"] ?? 0 }
        try await health.waitForNewestHealth(timeout: 3_600, description: "the consumers took every accepted point") { newest in
            ["motion", "track", "uploader"].allSatisfy { sum(newest, $0, \.processed) >= accepted }
        }
        let consumedAt = (ContinuousClock.now - start).seconds
        let deadline = ContinuousClock.now + .seconds(600)
        while fleet.sink!.points().count < accepted {
            guard ContinuousClock.now < deadline else { throw TestSupportError("scale-out: the sink holds \(fleet.sink!.points().count) of \(accepted) points") }
            _ = try await TestClient.command(client, device: "_fleet", "syncNow", timeout: 60)
        }
        let seconds = (ContinuousClock.now - start).seconds
        let after = cpu()
        let perFix = after.keys.sorted().map { key in
            String(format: "%@ %.0f µs", key as NSString, (after[key]! - (before[key] ?? 0)) / Double(total) * 1e6)
        }
        let all = after.keys.reduce(0.0) { $0 + after[$1]! - (before[$1] ?? 0) } / Double(total) * 1e6
        await client.disconnect()
        let times = String(format: "published in %.1f s, filtered by %.1f, consumed by %.1f, at the sink by %.1f (%d requests); ",
                           published, filteredAt, consumedAt, seconds, fleet.sink!.lines.count)
        return (Double(total) / seconds, times + perFix.joined(separator: ", ") + String(format: " (%.0f µs in all)", all))
    }
}
