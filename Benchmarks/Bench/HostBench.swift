import Bus
import FilterCore
import Foundation
import TrackerLog
import Model
import Runtime
import TestSupport

/// The service host alone, in process, without a broker: raw fixes through
/// a host running a filter-shaped service (core judgement, decision log,
/// judged points, points outbox), in batches as the network loop makes
/// them. What the host costs per message, apart from MQTT.
enum HostBench {
    final class NullBus: MessageBus {
        func publish(_ message: MQTTMessage, acknowledged: MQTTClient.Acknowledgement?) throws { acknowledged?(.success(())) }
    }

    /// `devices` speak in turn, each once a round; the first nine rounds go
    /// through before the clock starts, so every device is known to the host
    /// and its first fix judged (it waits for the fixes after it over 8 s).
    static func run(count: Int, devices: Int) throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("hostbench-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        // HOST_BUDGET=MB: the host's cacheBudgetMB (the services' default, 8, otherwise).
        let budgetMB = try environmentNumber("HOST_BUDGET", minimum: 1, maximum: 65_536) ?? 8
        // HOST_BATCH=N: messages a commit (400 otherwise; the services downstream of the filter commit a few dozen).
        let batchSize = try environmentNumber("HOST_BATCH", minimum: 1, maximum: 100_000) ?? 400
        let counters = HealthCounters()
        let host = try ServiceHost(definition(), databasePath: path, bus: NullBus(), topics: Topics(),
                                   logger: Logger(label: "bench", minimum: .error), counters: counters,
                                   cacheBudgetBytes: budgetMB << 20)
        let noisy = NoiseGenerator(seed: 1).apply(to: try Fixtures.fixes("mtv-drive-truth.jsonl"))
        let warmup = Throughput.firstFixWarmup * devices
        let messages = (0..<(warmup + count)).map { i -> MQTTMessage in
            let device = DeviceID("fbench\(i % devices)")!
            let s = noisy[(i / devices) % noisy.count]
            let raw = RawFix(device: device, seq: Int64(i / devices + 1), sessionID: "s",
                             timeMs: s.fix.timeMs + Int64(i / devices / noisy.count) * 10_000_000, receivedMs: 0, source: .device,
                             latitude: s.fix.lat, longitude: s.fix.lon, accuracyM: s.fix.acc, speedMps: s.fix.speed, courseDeg: s.fix.course)
            return MQTTMessage(topic: "tracker/\(device)/raw", payload: JSONCoding.bytes(raw))
        }
        func receive(_ range: Range<Int>) {
            for batch in stride(from: range.lowerBound, to: range.upperBound, by: batchSize) {
                messages[batch..<min(batch + batchSize, range.upperBound)].forEach(host.receive)
                precondition(host.commit())
            }
        }
        receive(0..<warmup)
        let loadsBefore = counters.counted("rowLoads")
        let cpuBefore = ChildProcess.cpu(of: getpid())
        let start = ContinuousClock.now
        receive(warmup..<messages.count)
        let seconds = (ContinuousClock.now - start).seconds
        let cpuAfter = ChildProcess.cpu(of: getpid())
        let loads = Double(counters.counted("rowLoads") - loadsBefore) / Double(count)
        print(String(format: "host + filter core, in process: %.0f msg/s (%d messages over %d devices, batches of %d, after nine unmeasured rounds; a cache of %d MB; %.2f row loads a message)",
                     Double(count) / seconds, count, devices, batchSize, budgetMB, loads))
        // CPU time is steadier than the rate: the disk's pauses do not count.
        if let cpuBefore, let cpuAfter {
            Throughput.printCPU(user: cpuAfter.user - cpuBefore.user, system: cpuAfter.system - cpuBefore.system, messages: count)
        }
    }

    /// The filter's shape: judge, log the judgement (decision and judged point in one row), send the point.
    static func definition() -> ServiceDefinition<FilterRow> {
        ServiceDefinition(name: "filter", migrations: [("logs", DeviceLog.schema("judgements") + DeviceLog.schema("points"))],
                          rows: RowCodec(fresh: { FilterRow() }, encode: { $0.stored },
                                         decode: { (try FilterRow.restored(from: $0, using: JSONCoding.decoder).row, nil) }, binary: true)) { db in
            let judgements = try DeviceLog(db: db, table: "judgements")
            let points = try DeviceLog(db: db, table: "points")
            let core = FilterCore()
            return Routes(
                inputs: [.sequenced("raw", decode: { try RawFix(flat: $0) ?? JSONCoding.decoder.decode(RawFix.self, from: Data($0)) }) { raw, work in
                    for j in core.handle(raw, row: &work.row, rejectionEvents: .all) {
                        let fix = j.judged.fix
                        try work.append(to: judgements, seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs,
                                        body: JSONCoding.bytes(LoggedJudgement(j, decision: true, point: true)))
                        if let point = j.point {
                            try work.send(PointMessage(device: work.device, point: point, epoch: work.epoch),
                                          sessionID: fix.sessionID, timeMs: point.timeMs)
                            work.emit(.location(point), timeMs: point.timeMs)
                        } else {
                            work.emit(.locationRejected(j.decision), timeMs: fix.timeMs)
                        }
                    }
                }],
                commands: [CommandRoute("getDecisions") { _, _ in 0 }, CommandRoute("getRawPoints") { _, _ in 0 }],
                outbox: OutboxRoute(log: points) { $0.points($1) },
                startOver: { _, _ in FilterRow() })
        }
    }
}
