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

    static func run(count: Int) throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("hostbench-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let host = try ServiceHost(definition(), databasePath: path, bus: NullBus(), topics: Topics(),
                                   logger: Logger(label: "bench", minimum: .error), counters: HealthCounters())
        let noisy = NoiseGenerator(seed: 1).apply(to: try Fixtures.fixes("mtv-drive-truth.jsonl"))
        let devices = 8
        let messages = (0..<count).map { i -> MQTTMessage in
            let device = DeviceID("fbench\(i % devices)")!
            let s = noisy[(i / devices) % noisy.count]
            let raw = RawFix(device: device, seq: Int64(i / devices + 1), sessionID: "s",
                             timeMs: s.fix.timeMs + Int64(i / devices / noisy.count) * 10_000_000, receivedMs: 0, source: .device,
                             latitude: s.fix.lat, longitude: s.fix.lon, accuracyM: s.fix.acc, speedMps: s.fix.speed, courseDeg: s.fix.course)
            return MQTTMessage(topic: "tracker/\(device)/raw", payload: Array(JSONCoding.encode(raw)))
        }
        let start = ContinuousClock.now
        for batch in stride(from: 0, to: messages.count, by: 400) {
            messages[batch..<min(batch + 400, messages.count)].forEach(host.receive)
            precondition(host.commit())
        }
        let seconds = (ContinuousClock.now - start).seconds
        print(String(format: "host + filter core, in process: %.0f msg/s (%d messages, batches of 400)", Double(count) / seconds, count))
    }

    /// The filter's shape: judge, log the decision and the judged point, send the point.
    static func definition() -> ServiceDefinition<FilterRow> {
        ServiceDefinition(name: "filter", migrations: [("logs", DeviceLog.schema("decisions") + DeviceLog.schema("judged") + DeviceLog.schema("points"))],
                          rows: .json(fresh: { FilterRow() })) { db in
            let decisions = try DeviceLog(db: db, table: "decisions")
            let judged = try DeviceLog(db: db, table: "judged")
            let points = try DeviceLog(db: db, table: "points")
            let core = FilterCore()
            return Routes(
                inputs: [.sequenced("raw", decode: { try RawFix(flat: $0) ?? JSONCoding.decoder.decode(RawFix.self, from: Data($0)) }) { raw, work in
                    for j in core.handle(raw, row: &work.row, rejectionEvents: .all) {
                        let fix = j.judged.fix
                        try work.append(to: decisions, seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs, body: Array(JSONCoding.encode(j.decision)))
                        try work.append(to: judged, seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs, body: Array(JSONCoding.encode(j.judged)))
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
                outbox: OutboxRoute(log: points) { $0.points($1) })
        }
    }
}
