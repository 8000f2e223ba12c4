import Bus
import Foundation
import Model
import TestSupport
import Testing

/// The uploader as a real process against a real local HTTP server
/// (`scripts/http-sink.py`, Python's standard library): a 500, then a kill -9
/// in the middle, then a broker restart; the sink ends with every point,
/// exactly once after dropping duplicates by device + seq.
@Suite(.serialized) struct UploaderEndToEndTests {
    @Test func everyPointArrivesOnceThroughFailuresAndAKill() async throws {
        let broker = try TestBroker(persistent: true)
        let sink = try HTTPSink(in: broker.directory, answers: ["500", "503"])
        let uploader = try ServiceHarness.started("uploader", on: broker)
        let client = try await TestClient.connect(port: broker.port)
        try await broker.waitUntilOnline("uploader")
        let configured = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
            "url": .string("\(sink.url)/points"), "batchSize": .number(50), "retryBaseDelaySec": .number(0.05),
            "retryMaxDelaySec": .number(0.2)]))
        #expect(configured.ok, "\(configured)")
        func publish(_ range: ClosedRange<Int64>) async throws {
            for seq in range {
                let device = DeviceID("van\(seq % 3)")!
                let p = TrackPoint(seq: seq, sessionID: "s", timeMs: 1_800_000_000_000 + seq * 1000, latitude: 48.1, longitude: 11.5, accuracyM: 5, odometerM: 0)
                try await client.publishAndWait(MQTTMessage(topic: "tracker/\(device)/points", payload: JSONCoding.bytes(PointMessage(device: device, point: p, epoch: "e"))))
            }
        }
        try await publish(1...300)
        uploader.kill9()
        try await publish(301...600)
        try broker.restart(graceful: true)  // as a product broker stops: its queues saved
        try uploader.start()
        try await publish(601...900)
        // Delivered: the restarted uploader says its queue is empty and the sink holds every point.
        // `processed` alone is no sign: points redelivered from before the kill count in it too,
        // so it can pass 600 while the last fixes are still on their way (CI saw 11 missing).
        let expected = Set((1...900).map { "van\($0 % 3):\($0)" })
        let health = try await MessageCollector(port: broker.port, filters: ["tracker/_health/uploader"])
        _ = try? await health.wait(timeout: 20, description: "the queue drained and the sink complete") { all in
            guard let last = all.last, let h = try? JSONCoding.decoder.decode(Health.self, from: Data(last.payload)),
                  h.queueDepth == 0 else { return false }
            return expected.isSubset(of: sink.points().keys)
        }
        await health.close()
        // Every (device, seq) arrived; a batch sent just before the kill may have arrived twice, none is missing.
        let seen = Set(sink.points().keys)
        let missing = expected.subtracting(seen).sorted()
        #expect(seen.count == 900, "the sink holds \(seen.count) of 900 distinct points; missing \(missing.prefix(20))")
        await client.disconnect()
    }
}
