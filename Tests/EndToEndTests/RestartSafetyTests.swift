import Bus
import Foundation
import Model
import TestSupport
import Testing

extension HeavySuites {
    /// Gateway and filter through a broker restart and a flood: nothing in
    /// flight is forgotten, `queueDepth` returns to 0, the rings are trimmed.
    @Suite(.serialized) struct RestartSafetyTests {
        /// Waits until every named service's health satisfies `done`.
        func waitForHealth(_ broker: TestBroker, _ services: Set<String>, timeout: Double = 60,
                           _ done: @escaping @Sendable (Health) -> Bool) async throws {
            let health = try await MessageCollector(port: broker.port, filters: ["tracker/_health/+"])
            defer { Task { await health.close() } }
            do {
                try await health.waitForNewestHealth(timeout: timeout, description: "health of \(services.sorted())") { newest in
                    services.allSatisfy { Health.newestByService(newest)[$0].map(done) ?? false }
                }
            } catch {
                // Say where each service stood.
                let latest = Health.newestByService(health.newestHealth)
                throw TestSupportError("\(error); last health: " + services.sorted().map { s in
                    latest[s].map { "\(s) processed \($0.processed) queueDepth \($0.queueDepth) counters \($0.counters ?? [:])" } ?? "\(s) none"
                }.joined(separator: "; "))
            }
        }

        /// The ring keeps its capacity once the broker has acknowledged everything
        /// above it: trims follow the acknowledgements at the next tick (≤ 1 s),
        /// so ask until it has, within a deadline.
        func expectRing(_ client: MQTTClient, _ device: String, trimmedTo capacity: Int) async throws {
            let deadline = ContinuousClock.now + .seconds(10)
            var count = -1
            repeat {
                let ring = try await TestClient.command(client, device: device, "getRawFixes", args: .object(["limit": .number(10_000)]))
                count = ring.result?.arrayValue?.count ?? -1
            } while count != capacity && ContinuousClock.now < deadline
            #expect(count == capacity, "\(device): ring holds \(count)")
        }

        func fix(_ t: Double, _ i: Int) -> String {
            #"{"t":\#(t),"lat":\#(48.1 + Double(i % 500) * 1e-4),"lon":11.5,"acc":8}"#
        }

        @Test func aBrokerRestartMidStreamLosesNothingUnderBothServices() async throws {
            let broker = try TestBroker(persistent: true)
            let gateway = try ServiceHarness.started("gateway", on: broker, config: ["ringCapacity": 1_000])
            let filter = try ServiceHarness.started("filter", on: broker)
            defer { withExtendedLifetime((gateway, filter)) {} }  // running to the end (a harness kills its process when it goes)
            try await waitForHealth(broker, ["gateway", "filter"]) { $0.status == .online }
            let devices = (1...4).map { "r\($0)" }
            let perDevice = 1_500
            let publisher = try await TestClient.connect(port: broker.port)
            for i in 0..<perDevice {
                for device in devices {
                    try publisher.publish(MQTTMessage(topic: "tracker/\(device)/fixes", string: fix(1_793_197_938 + Double(i), i)))
                }
                // Halfway the broker restarts under both services, with messages in flight everywhere.
                if i == perDevice / 2 { try broker.restart(graceful: true) }
            }
            await publisher.drain(timeout: .seconds(30))
            let total = Int64(perDevice * devices.count)
            try await waitForHealth(broker, ["gateway", "filter"]) { h in h.processed >= total && h.queueDepth == 0 }
            // The fixes carry no Doppler speed: the last ones are published once the smoothing lag has passed.
            try await waitForHealth(broker, ["filter"]) { $0.judged >= total }
            for device in devices {
                // Every fix numbered once and every raw seq judged exactly once, in order.
                let decisions = try await TestClient.command(publisher, device: device, "getDecisions", args: .object(["limit": .number(10_000)]))
                let seqs = decisions.result?.arrayValue?.compactMap { $0["seq"]?.int64Value } ?? []
                #expect(seqs.count == perDevice && seqs.first == 1 && seqs.last == Int64(perDevice) && seqs == seqs.sorted(), "\(device): \(seqs.count) decisions")
                try await expectRing(publisher, device, trimmedTo: 1_000)
            }
        }

        @Test func aHundredThousandFixesOverTwentyDevicesLeaveNothingPending() async throws {
            let broker = try TestBroker()
            let gateway = try ServiceHarness.started("gateway", on: broker, config: ["ringCapacity": 1_000, "logLevel": "warning"])
            defer { withExtendedLifetime(gateway) {} }  // running to the end (its harness kills it when it goes)
            try await waitForHealth(broker, ["gateway"]) { $0.status == .online }
            let publisher = try await TestClient.connect(port: broker.port)
            let devices = 20, perDevice = 5_000
            for i in 0..<perDevice {
                for d in 0..<devices {
                    try publisher.publish(MQTTMessage(topic: "tracker/flood\(d)/fixes", string: fix(1_793_197_938 + Double(i), i)))
                }
            }
            await publisher.drain(timeout: .seconds(120))
            try await waitForHealth(broker, ["gateway"], timeout: 120) { $0.processed >= Int64(devices * perDevice) && $0.queueDepth == 0 }
            for d in 0..<devices { try await expectRing(publisher, "flood\(d)", trimmedTo: 1_000) }
        }
    }
}
