import Bus
import Foundation
import Model
import Synchronization
import TestSupport

/// `tracker-bench constellation [N] [DEVICES]`: the whole product, five
/// services and a local sink on one broker.
/// - Throughput: N fixes of noisy drives (1,600 a device, or N / DEVICES
///   over DEVICES devices, each round every device once, each device from
///   its own point of the drive, spread over it) in as fast as the
///   broker acknowledges, until the filter has taken every fix and the track
///   service has stored and the sink has received every point accepted by
///   then (fixes the filter holds for a later one come out once their device
///   is silent: latency, reported apart); against the broker's QoS 1 ceiling
///   (one publisher, one subscriber) measured on the same broker in the same run.
/// - Latency from publish to the `location` event at 1,000 fixes/s and at
///   half the measured throughput, over 20 fresh devices or DEVICES.
/// - Each service's memory after the run (`constellation 1000000` for the
///   issue's million fixes).
enum ConstellationBench {
    /// What one run measured: end to end and its relays (fixes/s), and the CPU a fix over every process (µs).
    struct Outcome {
        var throughput: Double
        var relays: Double
        var cpuPerFixUs: Double
    }

    @discardableResult
    static func run(count: Int, devices fleet: Int? = nil) async throws -> Outcome {
        // CONSTELLATION_WARMUP=K: a fleet already driving. Every device first
        // sends K fixes, unmeasured, and the clock starts once every service
        // has taken them, so the N measured fixes find every device known.
        // CONSTELLATION_LATENCY=0: throughput alone. All read before anything runs.
        try await run(count: count, devices: fleet, warmup: try environmentNumber("CONSTELLATION_WARMUP") ?? 0,
                      measuresLatency: try environmentNumber("CONSTELLATION_LATENCY").map { $0 != 0 } ?? true, readsMemory: true)
    }

    /// One run; `readsMemory` false leaves out each service's memory (its idle reading waits 12 s).
    @discardableResult
    static func run(count: Int, devices fleet: Int?, warmup: Int, measuresLatency: Bool, readsMemory: Bool) async throws -> Outcome {
        // CONSTELLATION_BACKLOG=N: every service's outputBacklogMax.
        // CONSTELLATION_BUDGET=MB: every service's cacheBudgetMB.
        var quiet: [String: Any] = ["logLevel": "warning", "healthIntervalSec": 0.2]
        if let backlog = try environmentNumber("CONSTELLATION_BACKLOG", minimum: 100) { quiet["outputBacklogMax"] = backlog }
        if let budget = try environmentNumber("CONSTELLATION_BUDGET", minimum: 1, maximum: 65_536) { quiet["cacheBudgetMB"] = budget }
        var config = Dictionary(uniqueKeysWithValues: Constellation.services.map { ($0, quiet) })
        // CONSTELLATION_RETAIN_LIVE=0: the track's retainLiveFrames off (the setting for a large fleet).
        if let retain = try environmentNumber("CONSTELLATION_RETAIN_LIVE", minimum: 0, maximum: 1) {
            config["track"]?["retainLiveFrames"] = retain != 0
            print("live frames \(retain != 0 ? "retained" : "not retained") (retainLiveFrames)")
        }
        let constellation = try Constellation(config: config)
        var ceilings: [Double] = []
        for _ in 0..<3 { ceilings.append(try await Throughput.brokerCeiling(constellation.broker, count: min(count, 50_000))) }
        let ceiling = ceilings.median
        // The same hops and fan-out with nothing done at any of them, on the same broker, over as many devices.
        let devices = fleet ?? max(1, (count + 1_599) / 1_600)
        var relays: [Double] = []
        for _ in 0..<3 {
            relays.append(try await Relay.measureConstellation(constellation.broker, count: min(count, 50_000) / 1_000 * 1_000, devices: devices))
        }
        let relay = relays.median
        try await constellation.start()
        defer { constellation.stop() }
        let client = try await constellation.operatorClient()
        _ = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
            "url": .string(constellation.sinkURL), "batchSize": .number(500)]))

        // Twenty real-looking drives (seeds 1–20), repeated under other device ids as the fleet grows.
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let drives = (1...20).map { seed in Array(NoiseGenerator(seed: UInt64(seed)).apply(to: truth).prefix(1_600).map(\.fix)) }
        // A fleet as it is at any hour, whatever its size: each device starts at
        // its own point of the drive, the starts spread evenly over it, so the
        // fleet drives and stands (the drive stands still for minutes at its
        // start and at lights) in the drive's own mix however few fixes each
        // device sends. Every device from one point would make the work a fix
        // depend on where that point is: fixes 700-713 all move and each makes
        // a point, while the whole drive makes one from about half its fixes.
        let rounds = (count + devices - 1) / devices
        func send(rounds range: Range<Int>, limit: Int) async throws {
            var sent = 0
            for round in range where sent < limit {
                for device in 0..<devices where sent < limit {
                    let fix = ConstellationBench.fix(drives[device % 20], device * 1_600 / devices + round)
                    try await client.publish(inFlightBelow: 2_000, MQTTMessage(topic: "tracker/fleet\(device)/fixes", string: DemoRecording.line(fix)))
                    sent += 1
                }
            }
            await client.drain(timeout: .seconds(3_600))
        }
        // The filter has taken `total` fixes, then the track has stored and the sink has every point
        // it accepted: the filter's health then, and when each was reached. Fixes it holds for a
        // later one (the look-ahead, the smoothing lag) come out once their device has been silent
        // `lookAheadSec` (30 s): that is latency, not throughput, so this leaves them out.
        func settle(_ total: Int64, _ what: String) async throws
            -> (taken: Health, filtered: ContinuousClock.Instant, stored: ContinuousClock.Instant, delivered: ContinuousClock.Instant) {
            let taken = try await constellation.waitHealth("filter", timeout: 3_600, description: "the filter took \(what)") { $0.processed >= total }
            let filtered = ContinuousClock.now
            let stored = try await downstream(constellation, accepted: taken.counters?["accepted"] ?? 0, what, timeout: 3_600)
            return (taken, filtered, stored, ContinuousClock.now)
        }
        let warm = Int64(warmup * devices)
        var warmAccepted: Int64 = 0
        if warmup > 0 {
            try await send(rounds: 0..<warmup, limit: Int(warm))
            let accepted = try await settle(warm, "the warm-up").taken.counters?["accepted"] ?? 0
            warmAccepted = accepted
            print("warm-up: \(warmup) fixes from each of \(devices) devices, unmeasured (\(accepted) accepted)")
            try await waitQuiet(constellation, "the warm-up")
        }
        // Each process's CPU time over the measured run: what a fix costs where, and what grows with the fleet.
        let cpuBefore = CPUTimes(constellation)
        let start = ContinuousClock.now
        try await send(rounds: warmup..<(warmup + rounds), limit: count)
        let published = (ContinuousClock.now - start).seconds
        let settled = try await settle(warm + Int64(count), "every fix")
        let cpuAfter = CPUTimes(constellation)
        let cpuSpent = cpuAfter.perFix(since: cpuBefore, count: count)
        let taken = settled.taken, accepted = taken.counters?["accepted"] ?? 0
        let held = warm + Int64(count) - taken.judged
        if ProcessInfo.processInfo.environment["CONSTELLATION_COUNTERS"] != nil { print("filter counters:", (taken.counters ?? [:]).sorted { $0.key < $1.key }) }
        let (filtered, stored, delivered) = ((settled.filtered - start).seconds, (settled.stored - start).seconds, (settled.delivered - start).seconds)
        let atSink = constellation.sink!.points().count
        let judged = try await constellation.waitJudged(warm + Int64(count), timeout: 3_600)
        let allJudged = (ContinuousClock.now - start).seconds
        print(String(format: "broker QoS 1 ceiling: %@ msg/s, median %.0f",
                     ceilings.map { String(format: "%.0f", $0) }.joined(separator: " / ") as NSString, ceiling))
        print(String(format: "%d fixes over %d devices: published in %.1f s, taken by the filter in %.1f s (%lld accepted, %lld held for later fixes; warm-up included), stored in %.1f s, at the sink in %.1f s (%d distinct there)",
                     count, devices, published, filtered, accepted, held, stored, delivered, atSink))
        print(String(format: "  the held fixes judged by %.1f s, once their devices were silent (%lld accepted in all)", allJudged, judged.counters?["accepted"] ?? 0))
        print(String(format: "do-nothing relays over the same hops and fan-out: %@ fixes/s, median %.0f (%.2f of the ceiling)",
                     relays.map { String(format: "%.0f", $0) }.joined(separator: " / ") as NSString, relay, relay / ceiling))
        let throughput = Double(count) / delivered
        // What a fix costs downstream depends on whether it makes a point: the mix, to compare runs by.
        print(String(format: "end to end (fixes in until every accepted point is stored and at the sink): %.0f fixes/s, %.2f of the ceiling, %.2f of the relays; to the track store %.0f fixes/s; %.2f points a measured fix",
                     throughput, throughput / ceiling, throughput / relay, Double(count) / stored, Double(accepted - warmAccepted) / Double(count)))

        // Row loads: messages whose device's state was not in the service's cache (warm-up included).
        var loads: [String] = []
        for name in Constellation.services {
            let health = try await constellation.waitHealth(name, timeout: 30, description: "\(name)'s health") { _ in true }
            let perCommit = (health.counters?["commits"]).flatMap { $0 > 0 ? String(format: "%.0f", Double(health.processed) / Double($0)) : nil }
            // Frames a newer one of the same batch replaced before they went out (a device's live frame, its
            // OwnTracks location): a device's points that came together (fast devices, fixes released at once) make one.
            let conflated = Double(health.counters?["conflated"] ?? 0) / Double(max(1, health.processed))
            loads.append(String(format: "%@ %.2f (%@ a commit%@)", name as NSString, health.rowLoadsPerMessage, (perCommit ?? "–") as NSString,
                                conflated > 0 ? String(format: ", %.2f conflated a message", conflated) as NSString : ""))
        }
        print("row loads per message, and messages per commit, warm-up included: " + loads.joined(separator: ", "))
        print("CPU per fix over the measured run, user + system: " + cpuSpent)
        // LATENCY_RATES=a,b,…: other rates besides these two.
        let extra = (ProcessInfo.processInfo.environment["LATENCY_RATES"] ?? "").split(separator: ",").compactMap { Int($0) }
        for rate in [1_000, Int(throughput / 2)] + extra where measuresLatency {
            let (p50, p99, samples) = try await latency(constellation, rate: rate, seconds: 10, drives: drives, tag: "r\(rate)",
                                                        devices: max(20, fleet ?? 20))
            print(String(format: "latency publish → location event at %d fixes/s: p50 %.1f ms, p99 %.1f ms (%d events)", rate, p50, p99, samples))
        }
        // A fleet in steady state: DEVICES devices that already drive (a few fixes each, unmeasured), one more fix each at 1,000 a second.
        if let fleet, fleet > 20, measuresLatency {
            let (p50, p99, samples) = try await latency(constellation, rate: 1_000, seconds: max(10, fleet / 1_000), drives: drives,
                                                        tag: "steady", devices: fleet, warmup: Throughput.firstFixWarmup)
            print(String(format: "latency publish → location event at 1000 fixes/s over %d devices already driving: p50 %.1f ms, p99 %.1f ms (%d events)",
                         fleet, p50, p99, samples))
        }
        if readsMemory {
            let memory = try await MemoryReadings.take(Constellation.services.map { constellation.services[$0]!.process }) {
                try await waitQuiet(constellation, "after the run")
            }
            for (service, (busy, idle)) in zip(Constellation.services, zip(memory.busy, memory.idle)) {
                print(String(format: "  %@: peak RSS %.1f MB (at the end %.1f MB, %.1f MB its own, the rest shared libraries; idle %.1f MB, %.1f MB its own)",
                             service as NSString, megabytes(busy?.peak), megabytes(busy?.resident), megabytes(busy?.own),
                             megabytes(idle?.resident), megabytes(idle?.own)))
            }
        }
        await client.disconnect()
        return Outcome(throughput: throughput, relays: relay, cpuPerFixUs: cpuAfter.totalPerFix(since: cpuBefore, count: count))
    }

    /// The drive's `index`-th fix; past its end, the drive again from the
    /// start, later by as long as it lasted (sent back in time, the fixes
    /// were refused as out of order and the run waited for them for an hour).
    static func fix(_ drive: [DeviceFix], _ index: Int) -> DeviceFix {
        var fix = drive[index % drive.count]
        fix.t += Double(index / drive.count) * (drive[drive.count - 1].t - drive[0].t + 1)
        return fix
    }

    /// Waits until the track has stored and the uploader delivered the
    /// filter's `accepted` points; returns when the track had them.
    static func downstream(_ constellation: Constellation, accepted: Int64, _ what: String, timeout: Double) async throws -> ContinuousClock.Instant {
        try await constellation.waitHealth("track", timeout: timeout, description: "\(what): every point stored") { $0.processed >= accepted }
        let stored = ContinuousClock.now
        try await constellation.waitHealth("uploader", timeout: timeout, description: "\(what): every point delivered") {
            $0.processed >= accepted && $0.queueDepth == 0
        }
        return stored
    }

    /// Waits until the broker and every service have spent at most 10 ms of
    /// CPU each, on average, over half a second (the clock's tick). The health counters say what each
    /// service took, not what is still queued for it: the filter takes the
    /// motion service's updates after the track and the uploader are done,
    /// and a clock started then measures that backlog (up to 300 ms).
    static func waitQuiet(_ constellation: Constellation, _ what: String, timeout: Double = 600) async throws {
        let processes = CPUTimes(constellation).processes.count
        let deadline = ContinuousClock.now + .seconds(timeout), window = Duration.milliseconds(500)
        var samples: [(at: ContinuousClock.Instant, cpu: Double)] = []
        while ContinuousClock.now < deadline {
            let now = ContinuousClock.now, cpu = CPUTimes(constellation).total
            samples.append((now, cpu))
            while samples.count > 1, now - samples[1].at >= window { samples.removeFirst() }
            if now - samples[0].at >= window, cpu - samples[0].cpu <= 0.01 * Double(processes) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestSupportError("\(what): the constellation was still busy after \(Int(timeout)) s")
    }

    /// Fixes paced at `rate` a second over `devices` fresh devices; the time
    /// from each publish to its `location` event (a device's k-th fix gets seq k).
    /// With `warmup`, each device first sends that many fixes, unmeasured and
    /// unpaced, from where its drive is under way (the drives stand still for
    /// their first minutes), and the filter takes them all before the clock runs.
    static func latency(_ constellation: Constellation, rate: Int, seconds: Int, drives: [[DeviceFix]], tag: String,
                        devices: Int = 20, warmup: Int = 0) async throws
        -> (p50: Double, p99: Double, samples: Int) {
        let client = try await constellation.operatorClient()
        let underWay = warmup > 0 ? 700 : 0
        if warmup > 0 {
            let before = try await constellation.waitJudged(0).judged
            for k in 0..<warmup {
                for d in 0..<devices {
                    try await client.publish(inFlightBelow: 2_000, MQTTMessage(topic: "tracker/\(tag)-\(d)/fixes", string: DemoRecording.line(drives[d % 20][underWay + k])))
                }
            }
            await client.drain(timeout: .seconds(600))
            let judged = try await constellation.waitJudged(before + Int64(warmup * devices), timeout: 600)
            // And downstream has caught up, so the clock starts on an idle constellation.
            _ = try await downstream(constellation, accepted: judged.counters?["accepted"] ?? 0, "the warm-up", timeout: 600)
        }
        try await waitQuiet(constellation, "before \(tag)")
        let judgedBefore = try await constellation.waitJudged(0).judged
        let sentAt = Mutex<[String: ContinuousClock.Instant]>([:])
        let latencies = Mutex<[Double]>([])
        let events = try MQTTClient(MQTTOptions(port: constellation.broker.operatorPort, clientID: "bench-events-\(tag)", cleanStart: true))
        let rawLatencies = Mutex<[Double]>([])
        // LATENCY_TRACE=FILE: each event's send time (s from the first publish) and latency (ms), to find what the tail lines up with.
        let traceFile = ProcessInfo.processInfo.environment["LATENCY_TRACE"], tracing = traceFile != nil
        let trace = Mutex<[(ContinuousClock.Instant, Double)]>([])
        events.setHandler { message in
            let received = ContinuousClock.now
            if message.topic.hasSuffix("/raw") {
                // The gateway's hop alone: its raw fix carries the seq.
                if let raw = try? JSONCoding.decoder.decode(RawFix.self, from: Data(message.payload)),
                   let sent = sentAt.withLock({ $0["\(message.topic.split(separator: "/")[1]):\(raw.seq)"] }) {
                    rawLatencies.withLock { $0.append((received - sent).seconds * 1_000) }
                }
                return
            }
            guard let event = try? JSONCoding.decoder.decode(Event.self, from: Data(message.payload)),
                  case .location(let point) = event.body,
                  let sent = sentAt.withLock({ $0["\(event.device.rawValue):\(point.seq)"] }) else { return }
            latencies.withLock { $0.append((received - sent).seconds * 1_000) }
            if tracing { trace.withLock { $0.append((sent, (received - sent).seconds * 1_000)) } }
        }
        try await events.connect()
        try await events.subscribe(["tracker/+/events"] + (ProcessInfo.processInfo.environment["LATENCY_HOPS"] != nil ? ["tracker/+/raw"] : []))
        let start = ContinuousClock.now
        let total = rate * seconds
        for i in 0..<total {
            let due = start + .microseconds(Int64(i) * 1_000_000 / Int64(rate))
            if due > ContinuousClock.now { try await Task.sleep(until: due, clock: .continuous) }
            let device = "\(tag)-\(i % devices)", k = warmup + i / devices
            sentAt.withLock { $0["\(device):\(k + 1)"] = ContinuousClock.now }
            try client.publish(MQTTMessage(topic: "tracker/\(device)/fixes",
                                           string: DemoRecording.line(fix(drives[(i % devices) % 20], underWay + k))))
        }
        await client.drain(timeout: .seconds(60))
        // Listen until the filter has judged every fix: a device's first fix
        // waits 10 s for the fixes after it, so over fresh devices with one
        // fix each every event comes that late. Then the pipeline's latency.
        do { try await constellation.waitJudged(judgedBefore + Int64(total), timeout: 60) } catch { print("  (\(tag): \(error); the events so far count)") }
        try await Task.sleep(for: .seconds(2))
        await events.disconnect()
        await client.disconnect()
        let raw = rawLatencies.withLock { $0 }.sorted()
        if !raw.isEmpty { print(String(format: "  publish → raw (the gateway's hop) at %d fixes/s: p50 %.1f ms, p99 %.1f ms", rate, raw[raw.count / 2], raw[raw.count * 99 / 100])) }
        if let traceFile {
            let lines = trace.withLock { $0 }.map { String(format: "%.4f %.2f", ($0.0 - start).seconds, $0.1) }.joined(separator: "\n")
            do { try Data((lines + "\n").utf8).write(to: URL(fileURLWithPath: "\(traceFile).\(tag)")) } catch { print("  (LATENCY_TRACE: \(error))") }
        }
        let sorted = latencies.withLock { $0 }.sorted()
        guard !sorted.isEmpty else { return (0, 0, 0) }
        return (sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)], sorted.count)
    }
}
