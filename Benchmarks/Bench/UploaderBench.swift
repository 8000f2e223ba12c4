import Bus
import Foundation
import Model
import Synchronization
import TestSupport

/// `tracker-bench uploader [N]`: points delivered per second to a local sink
/// that answers at once (scripts/http-sink.py), against the filter's output
/// rate and the uploader only queueing the same points, in the same run.
enum UploaderBench {
    static func run(count: Int) async throws {
        let broker = try TestBroker()
        let filterRate = try await Throughput.filter(broker, count: count)
        let queued = try await measure(broker, count: count, upload: false)
        let delivered = try await measure(broker, count: count, upload: true)
        let caughtUp = try await measure(broker, count: count, upload: true, backlog: true)
        print(String(format: "filter output (verdicts):              %8.0f points/s", filterRate))
        print(String(format: "uploader queueing only (autoSync off): %8.0f points/s", queued))
        print(String(format: "uploader queueing and delivering:      %8.0f points/s  (%.2f of the filter's output; %.2f of queueing only)",
                     delivered, delivered / filterRate, delivered / queued))
        print(String(format: "uploader catching up a backlog of %d:  %8.0f points/s  (%.2f of delivering as they come)",
                     count, caughtUp, caughtUp / delivered))
    }

    /// Points published until the uploader has them all: queued (health's
    /// processed) or delivered (the sum of `uploaded` events). A `backlog`
    /// is queued first with autoSync off (an endpoint that was away) and
    /// timed from when autoSync comes on until the sink has every point.
    static func measure(_ broker: TestBroker, count: Int, upload: Bool, backlog: Bool = false) async throws -> Double {
        let sink = try HTTPSink(in: broker.directory)
        let uploader = try await Throughput.launch("uploader", broker, listening: ["tracker/_fleet/events"], config: ["healthIntervalSec": 0.1])
        let collector = uploader.sink
        let client = try await TestClient.connect(port: broker.port)
        let reply = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
            "url": .string("\(sink.url)/points"), "batchSize": .number(500), "autoSync": .bool(upload && !backlog)]))
        guard reply.ok else { throw TestSupportError("configureSync refused: \(reply)") }
        let payloads = MotionThroughput.payloads(count)
        var start = ContinuousClock.now
        for p in payloads {
            try await client.publish(inFlightBelow: 1_000, MQTTMessage(topic: p.topic, payload: p.payload))
        }
        let total = Int64(payloads.count)
        if backlog {
            try await collector.waitForHealth(timeout: 300, description: "every point queued") { $0.processed >= total }
            start = ContinuousClock.now
            let on = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object(["autoSync": .bool(true)]))
            guard on.ok else { throw TestSupportError("configureSync refused: \(on)") }
        }
        let tally = Mutex((scanned: 0, uploaded: Int64(0)))
        try await collector.wait(timeout: 300, description: upload ? "every point uploaded" : "every point queued") { all in
            tally.withLock { t in
                for m in all[t.scanned...] {
                    if upload, m.topic.hasSuffix("/events"), let event = try? JSONCoding.decoder.decode(Event.self, from: Data(m.payload)),
                       case .uploaded(let n) = event.body { t.uploaded += Int64(n) }
                    if !upload, m.topic.contains("_health"), let h = try? JSONCoding.decoder.decode(Health.self, from: Data(m.payload)) {
                        t.uploaded = max(t.uploaded, h.processed)
                    }
                }
                t.scanned = all.count
                return t.uploaded >= total
            }
        }
        let seconds = (ContinuousClock.now - start).seconds
        try await uploader.finish(messages: payloads.count, broker)
        await client.disconnect()
        await collector.close()
        return Double(payloads.count) / seconds
    }
}
