import Bus
import Foundation
import Model
import TestSupport
import Testing

extension HeavySuites {
    /// The five services, a broker with the product's logins and ACL, and a
    /// local sink, as real processes: the demo recording end to end.
    @Suite(.serialized) struct ConstellationTests {
        static let device = "demo-van"

        /// An OwnTracks app's altitude and battery ride with each point to
        /// the customer's endpoint (gateway → filter → uploader).
        @Test func whatThePhoneSaidReachesTheSink() async throws {
            let constellation = try Constellation()
            try await constellation.start()
            defer { constellation.stop() }
            let client = try await constellation.operatorClient()
            #expect(try await constellation.syncToSink(batchSize: 50, with: client).ok)
            for i in 0..<5 {
                let payload = #"{"_type":"location","tst":\#(1_793_197_938 + 5 * i),"lat":\#(48.1 + 0.0002 * Double(i)),"lon":11.5,"acc":5,"alt":512,"batt":81}"#
                try await client.publishAndWait(MQTTMessage(topic: "owntracks/alice/phone", string: payload))
            }
            let sink = try await constellation.syncUntilSinkHolds(1, deadline: .now + .seconds(30), with: client)
            #expect(!sink.isEmpty, "no point reached the sink")
            let points = constellation.sink!.lines.compactMap { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["points"] as? [[String: Any]]
            }.joined()
            #expect(!points.isEmpty && points.allSatisfy { $0["altitudeM"] as? Double == 512 && $0["batteryPct"] as? Double == 81 },
                    "\(Array(points.prefix(2)))")
            await client.disconnect()
        }

        @Test func theDemoRecordingTellsItsStory() async throws {
            let constellation = try Constellation(logins: true)
            try await constellation.start()
            defer { constellation.stop() }
            let client = try await constellation.operatorClient()
            let events = try await constellation.collector(["tracker/\(Self.device)/events"])
            let synced = try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
                "url": .string(constellation.sinkURL)]))
            #expect(synced.ok, "\(synced)")
            try await Replay.armDemoFences(Self.device, with: client)
            let fixes = try Fixtures.lines("demo-drive.jsonl")
            try await Replay.publish(fixes, device: Self.device, with: client)
            try await constellation.waitJudged(Int64(fixes.count))

            // Accounting: every fix has one decision, accepted or rejected.
            let decisions = try await Replay.decisions(of: Self.device, with: client)
            #expect(decisions.count == fixes.count, "\(decisions.count) decisions for \(fixes.count) fixes")
            #expect(Set(decisions.map(\.seq)).count == decisions.count)
            let accepted = decisions.filter(\.accepted)

            // The track service stored every accepted point, and the sink got each.
            try await Replay.waitCount(of: Self.device, accepted.count, with: client)
            let sync = try await TestClient.command(client, device: "_fleet", "syncNow", timeout: 30)
            #expect(sync.ok, "\(sync)")
            let sink = constellation.sink!.points()
            let missing = accepted.filter { sink["\(Self.device):\($0.seq)"] == nil }
            #expect(missing.isEmpty, "\(missing.count) accepted points missing at the sink")

            // The story, in event time (the services publish independently):
            // leaves the depot, reaches the customer, dwells (2 min), parks (the
            // 5-min stop timeout), leaves, goes dark, passes the checkpoint.
            let timeline = events.events().enumerated().sorted { ($0.element.timeMs, $0.offset) < ($1.element.timeMs, $1.offset) }.map(\.element)
            let story = timeline.compactMap(Self.storyLine)
            let expected = ["exit depot", "enter customer", "dwell customer", "motion stationary", "motion moving", "exit customer",
                            "trackingGap", "enter checkpoint", "exit checkpoint"]
            #expect(Self.contains(story, inOrder: expected), "story: \(story)")
            #expect(story.filter { $0 == "trackingGap" }.count == 1, "story: \(story)")
            #expect(story.filter { $0 == "dwell customer" }.count == 1, "story: \(story)")
            // The dwell fires exactly its delay after the entry it follows.
            let crossings = timeline.compactMap { event -> Crossing? in if case .geofence(let c) = event.body { c } else { nil } }
            if let dwell = crossings.first(where: { $0.kind == .dwell }),
               let entry = crossings.last(where: { $0.geofenceID == "customer" && $0.kind == .enter && $0.timeMs <= dwell.timeMs }) {
                #expect(dwell.timeMs - entry.timeMs == 120_000)
            }
            await events.close()
            await client.disconnect()
        }

        /// Whether `expected` appears in `lines` in this order (other lines between allowed).
        static func contains(_ lines: [String], inOrder expected: [String]) -> Bool {
            var next = 0
            for line in lines where next < expected.count && line == expected[next] { next += 1 }
            return next == expected.count
        }

        /// The events that tell the demo's story, one short line each.
        static func storyLine(_ event: Event) -> String? {
            switch event.body {
            case .geofence(let crossing): "\(crossing.kind.rawValue) \(crossing.geofenceID)"
            case .motionChange(let state, _): "motion \(state.rawValue)"
            case .trackingGap: "trackingGap"
            case .tripEnded: "tripEnded"
            case .stopEnded: "stopEnded"
            default: nil
            }
        }
    }
}

/// Publishing a recording and reading back what the services made of it.
enum Replay {
    /// Publishes each fix at QoS 1, pipelined, and waits for every acknowledgement.
    static func publish(_ lines: [String], device: String, with client: MQTTClient) async throws {
        try await publish(lines.map { (device, $0) }, with: client)
    }

    /// The same for fixes of several devices, in the order given.
    static func publish(_ fixes: [(device: String, payload: String)], with client: MQTTClient) async throws {
        for fix in fixes {
            try await client.publish(inFlightBelow: 1_000, MQTTMessage(topic: "tracker/\(fix.device)/fixes", payload: Array(fix.payload.utf8)))
        }
        await client.drain(timeout: .seconds(60))
        #expect(client.inFlight == 0)
    }

    /// The demo's three fences (`Fixtures/demo-fences.jsonl`), armed for `device`.
    static func armDemoFences(_ device: String, with client: MQTTClient) async throws {
        for line in try Fixtures.lines("demo-fences.jsonl") {
            let fence = try JSONCoding.decoder.decode(JSONValue.self, from: Data(line.utf8))
            let added = try await TestClient.command(client, device: device, "addGeofence", args: fence)
            #expect(added.ok, "\(added)")
        }
    }

    struct DecisionRow: Decodable { var seq: Int64; var accepted: Bool; var reason: String }
    struct SeqRow: Decodable { var seq: Int64 }

    /// Waits (until `deadline`) for the track to store the `accepted` seqs of
    /// `device`, then expects each stored once.
    static func expectStoredOnce(_ accepted: Set<Int64>, of device: String, with client: MQTTClient,
                                 until deadline: ContinuousClock.Instant) async throws {
        var stored: [SeqRow] = []
        repeat {
            stored = try await all("getPoints", of: device, with: client)
        } while stored.count < accepted.count && ContinuousClock.now < deadline
        #expect(stored.count == accepted.count && Set(stored.map(\.seq)) == accepted,
                "\(device): track stored \(stored.count) rows (\(Set(stored.map(\.seq)).count) distinct) of \(accepted.count) accepted; missing: \(HeavySuites.ExactlyOnceTests.ranges(accepted.subtracting(stored.map(\.seq))))")
    }

    /// The filter's whole decision log for the device.
    static func decisions(of device: String, with client: MQTTClient) async throws -> [DecisionRow] {
        try await all("getDecisions", of: device, with: client)
    }

    /// Every row of a paged query (`getDecisions`, `getPoints` …) for the device.
    static func all<Row: Decodable>(_ command: String, of device: String, with client: MQTTClient) async throws -> [Row] {
        var rows: [Row] = []
        while true {
            let reply = try await TestClient.command(client, device: device, command, args: .object([
                "limit": .number(1_000), "offset": .number(Double(rows.count))]))
            guard reply.ok, let result = reply.result else { throw TestSupportError("\(command): \(reply)") }
            let page = try JSONCoding.decoder.decode([Row].self, from: JSONCoding.encode(result))
            rows += page
            if page.isEmpty || reply.nextOffset == nil && page.count < 1_000 { return rows }
        }
    }

    /// Waits until the track service has stored `count` points for the device
    /// (asking again after each reply, and after one that came too late).
    static func waitCount(of device: String, _ count: Int, with client: MQTTClient, timeout: Double = 60) async throws {
        var last = -1
        _ = try await TestClient.ask(client, device: device, "getCount", until: .now + .seconds(timeout)) { reply in
            if case .number(let n)? = reply.result { last = Int(n) }
            return last >= count
        }
        if last < count { throw TestSupportError("the track service stored \(last) of \(count) points") }
    }
}
