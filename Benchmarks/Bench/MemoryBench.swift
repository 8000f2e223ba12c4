import Bus
import Foundation
import Model
import TestSupport

/// `tracker-bench memory [N] [DEVICES]`: N fixes over DEVICES devices through
/// the gateway and the filter, then each service's memory (resident now and
/// its peak) and its files on disk. Services keep per-device state bounded by
/// `deviceCacheCapacity`; this shows what that means for a large fleet.
/// `MEMORY_WARMUP=K` first has every device send K fixes, outside the timed
/// run (the memory and the messages per commit still count them).
enum MemoryBench {
    static func run(count: Int, devices: Int) async throws {
        // MEMORY_WINDOW=N: fixes the publisher keeps unacknowledged (a fleet at full speed, or a gentler one).
        let window = try environmentNumber("MEMORY_WINDOW", minimum: 1) ?? 5_000
        // Health every 0.2 s: the run ends when a health report says every fix was judged, so
        // its interval bounds the error of the time measured (at 1 s, 9 % of a 11 s run).
        var config: [String: Any] = ["logLevel": "warning", "healthIntervalSec": 0.2]
        // MEMORY_CACHE=N: the services' deviceCacheCapacity, to see what it costs and saves.
        // MEMORY_BUDGET=MB: their cacheBudgetMB; MEMORY_SQLITE=MB: their sqliteCacheMB (the services' own ranges).
        if let capacity = try environmentNumber("MEMORY_CACHE", minimum: 1, maximum: 10_000_000) { config["deviceCacheCapacity"] = capacity }
        if let budget = try environmentNumber("MEMORY_BUDGET", minimum: 1, maximum: 65_536) { config["cacheBudgetMB"] = budget }
        if let sqlite = try environmentNumber("MEMORY_SQLITE", minimum: 1, maximum: 4_096) { config["sqliteCacheMB"] = sqlite }
        // MEMORY_BACKLOG=N: the services' outputBacklogMax (messages waiting for the broker).
        if let backlog = try environmentNumber("MEMORY_BACKLOG", minimum: 1) { config["outputBacklogMax"] = backlog }
        let services = try await GatewayAndFilter.start(gateway: config, filter: config)
        defer { services.stop() }
        let publisher = try await TestClient.connect(port: services.broker.port)
        // Round robin: every device speaks once per round, as a fleet does.
        func send(_ fixes: Range<Int>, fromRound first: Int) async throws {
            for i in fixes {
                let device = i % devices, round = first + i / devices
                let fix = #"{"t":\#(1_793_197_938 + round),"lat":\#(48.1 + Double(device % 1000) * 1e-3 + Double(round) * 1e-5),"lon":\#(11.5 + Double(device / 1000) * 1e-3),"acc":8,"speed":1.2,"course":90}"#
                try await publisher.publish(inFlightBelow: window, MQTTMessage(topic: "tracker/m\(device)/fixes", string: fix))
            }
            await publisher.drain(timeout: .seconds(600))
        }
        // MEMORY_WARMUP=K: every device sends K fixes before the clock starts: a fleet the
        // services know already, not one whose every device is new to their stores.
        let warmup = try environmentNumber("MEMORY_WARMUP") ?? 0
        if warmup > 0 {
            let start = ContinuousClock.now
            try await send(0..<(warmup * devices), fromRound: 0)
            try await services.waitJudged(Int64(warmup * devices))
            let seconds = (ContinuousClock.now - start).seconds
            print(String(format: "warm-up: %d fixes from each of %d devices in %.1f s (%.0f fixes/s), before the clock", warmup, devices, seconds,
                         Double(warmup * devices) / seconds))
        }
        // Each process's CPU time over the timed run: steadier than the wall clock on a
        // shared machine, and it says where a larger fleet's extra cost goes.
        func cpuTimes() -> CPUTimes {
            CPUTimes([("broker", services.broker.cpu), ("gateway", services.gateway.process?.cpu), ("filter", services.filter.process?.cpu)])
        }
        let cpuBefore = cpuTimes()
        let start = ContinuousClock.now
        try await send(0..<count, fromRound: warmup)
        try await services.waitJudged(Int64(warmup * devices + count))
        let seconds = (ContinuousClock.now - start).seconds
        let cpuSpent = cpuTimes().perFix(since: cpuBefore, count: count)
        print(String(format: "%d fixes over %d devices through gateway and filter in %.1f s (%.0f fixes/s)", count, devices, seconds, Double(count) / seconds))
        print("  CPU per fix, user + system: " + cpuSpent)
        // How many messages each commit carried: what a device's row write is spread over.
        let newest = services.newestHealth
        for name in ["gateway", "filter"] {
            guard let h = newest[name], let commits = h.counters?["commits"], commits > 0 else { continue }
            // Row loads: a device whose state was not in the cache, read from the store.
            print(String(format: "  %@: %.1f messages per commit (%lld commits), %.2f row loads per message", name as NSString,
                         Double(h.processed) / Double(commits), commits, h.rowLoadsPerMessage))
        }
        let named = [("gateway", services.gateway), ("filter", services.filter)]
        let memory = try await MemoryReadings.take(named.map { $0.1.process })
        for ((name, service), (busy, idle)) in zip(named, zip(memory.busy, memory.idle)) {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: service.dataDir.path)) ?? []
            let sizes = files.filter { $0.contains(".sqlite") }.sorted().map { file -> String in
                let bytes = (try? FileManager.default.attributesOfItem(atPath: service.dataDir.appendingPathComponent(file).path)[.size] as? Int) ?? 0
                return String(format: "%@ %.1f MB", file as NSString, Double(bytes) / 1e6)
            }
            print(String(format: "  %@: RSS %.1f MB at the end (%.1f MB its own, the rest shared libraries), %.1f MB idle (%.1f MB its own), peak %.1f MB; %@",
                         name as NSString, megabytes(busy?.resident), megabytes(busy?.own),
                         megabytes(idle?.resident), megabytes(idle?.own), megabytes(busy?.peak),
                         sizes.joined(separator: ", ") as NSString))
        }
    }
}
