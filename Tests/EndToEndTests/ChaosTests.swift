import Bus
import Foundation
import Model
import TestSupport
import Testing

extension HeavySuites {
    /// The whole constellation through a 10,000-fix replay while each service in
    /// turn is killed with SIGKILL and restarted, then the broker is restarted:
    /// every fix is judged once, the track store holds every accepted point once,
    /// and the sink every accepted point (exactly once after dropping duplicates
    /// by device + seq: an upload cut by a kill may be repeated, never lost).
    @Suite(.serialized) struct ChaosTests {
        @Test func killingEachServiceAndTheBrokerLosesAndDuplicatesNothing() async throws {
            let constellation = try Constellation(logins: true)
            try await constellation.start()
            defer { constellation.stop() }
            var client = try await constellation.operatorClient()
            let synced = try await constellation.syncToSink(batchSize: 100, with: client)
            #expect(synced.ok, "\(synced)")

            // Seven noisy drives (seeds 1–7 on the survey drive), 10,000 fixes in all, interleaved.
            let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
            let perDevice = (0..<7).map { 10_000 / 7 + ($0 < 10_000 % 7 ? 1 : 0) }
            var fixes: [(device: String, payload: String)] = []
            let drives = try (0..<7).map { k in
                Array(try NoiseGenerator(seed: UInt64(k + 1)).lines(over: truth).prefix(perDevice[k]))
            }
            for i in 0..<drives.map(\.count).max()! {
                for (k, drive) in drives.enumerated() where i < drive.count { fixes.append(("chaos\(k)", drive[i])) }
            }
            #expect(fixes.count == 10_000)

            // A sixth of the fixes, then kill -9 one service while it works through them;
            // the next sixth queues at the broker while it is down; then it restarts.
            let chunks = stride(from: 0, to: fixes.count, by: fixes.count / 6 + 1).map { Array(fixes[$0..<min($0 + fixes.count / 6 + 1, fixes.count)]) }
            try await Replay.publish(chunks[0], with: client)
            for (i, service) in Constellation.services.enumerated() {
                let harness = constellation.services[service]!
                harness.kill9()
                try await Replay.publish(chunks[i + 1], with: client)
                let restartedMs = Int64(Date().timeIntervalSince1970 * 1000)
                try harness.start()
                try await constellation.waitOnline([service], since: restartedMs)
            }
            // The broker stops as a product broker does (its sessions and queues
            // saved) while the services still work through the backlog.
            await client.disconnect()
            try constellation.broker.restart(graceful: true)
            try await constellation.waitOnline(Constellation.services, since: 0)
            client = try await constellation.operatorClient()

            // Every fix judged exactly once, and what the filter accepted is what the others hold.
            var acceptedTotal = 0
            for k in 0..<7 {
                let device = "chaos\(k)"
                let decisions = try await waitForDecisions(of: device, count: perDevice[k], with: client)
                #expect(decisions.count == perDevice[k], "\(device): \(decisions.count) decisions for \(perDevice[k]) fixes")
                #expect(Set(decisions.map(\.seq)).count == decisions.count, "\(device): a fix judged twice")
                let accepted = Set(decisions.filter(\.accepted).map(\.seq))
                acceptedTotal += accepted.count
                try await Replay.waitCount(of: device, accepted.count, with: client, timeout: 120)
                let stored: [Replay.SeqRow] = try await Replay.all("getPoints", of: device, with: client)
                #expect(stored.count == accepted.count && Set(stored.map(\.seq)) == accepted,
                        "\(device): track store \(stored.count) rows, \(Set(stored.map(\.seq)).count) distinct, \(accepted.count) accepted")
            }
            // The sink: every accepted point, after dropping duplicates by device + seq.
            let sink = try await constellation.syncUntilSinkHolds(acceptedTotal, deadline: .now + .seconds(120), with: client)
            #expect(sink.count == acceptedTotal, "the sink holds \(sink.count) distinct of \(acceptedTotal) accepted points")
            let repeated = sink.values.filter { $0 > 1 }.count
            print("chaos: 10,000 fixes, \(acceptedTotal) accepted; sink \(sink.count) distinct, \(repeated) delivered more than once")
            await client.disconnect()
        }

        /// The decision log once it holds `count` decisions (asking again after each reply), or as it is at the deadline.
        func waitForDecisions(of device: String, count: Int, with client: MQTTClient) async throws -> [Replay.DecisionRow] {
            // Working through the backlog the broker's restart left, the filter may answer late: `ask` asks again.
            _ = try await TestClient.ask(client, device: device, "getDecisions", args: .object([
                "limit": .number(1), "offset": .number(Double(count - 1))]), until: .now + .seconds(120)) { reply in
                if case .array(let rows)? = reply.result { !rows.isEmpty } else { false }
            }
            return try await Replay.decisions(of: device, with: client)
        }
    }
}
