import Bus
import FilterCore
import Foundation
import Model
import TestSupport
import Testing

/// Gateway and filter as real processes: fixes in, points and verdicts out.
@Suite(.serialized) struct FilterEndToEndTests {
    let broker: TestBroker
    let gateway: ServiceHarness
    let filter: ServiceHarness

    init() throws {
        broker = try TestBroker()
        gateway = try .started("gateway", on: broker)
        filter = try .started("filter", on: broker)
    }

    @Test func cityRunBecomesPointsWithAPlausibleOdometer() async throws {
        try await broker.waitUntilOnline("gateway", "filter")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/+/points", "tracker/+/events"])
        let publisher = try await TestClient.connect(port: broker.port)
        for line in try Fixtures.lines("city-run.jsonl") {
            try await publisher.publishAndWait(MQTTMessage(topic: "tracker/run1/fixes", string: line))
        }
        // Every fix gets a verdict: a location or a locationRejected event.
        try await out.wait(description: "30 verdicts") { all in
            all.filter { $0.string.contains(#""type":"location"#) }.count >= 30
        }
        let events = out.events()
        let rejected = events.compactMap { e -> Decision? in if case .locationRejected(let d) = e.body { d } else { nil } }
        #expect(!rejected.contains { $0.reason == "implied_speed" || $0.reason == "innovation_outlier" })
        let points = out.decoded(PointMessage.self, topicSuffix: "/points").map(\.point)
        #expect(points.count + rejected.count == 30)
        let odometer = try #require(points.last?.odometerM)
        #expect((80...130).contains(odometer), "odometer \(odometer)")

        let decisions = try await TestClient.command(publisher, device: "run1", "getDecisions", args: .object(["limit": .number(100)]))
        #expect(decisions.result?.arrayValue?.count == 30)
        let judged = try await TestClient.command(publisher, device: "run1", "getRawPoints", args: .object(["limit": .number(5)]))
        #expect(judged.result?.arrayValue?.map { $0["seq"]?.int64Value } == [1, 2, 3, 4, 5])
        let bad = try await TestClient.command(publisher, device: "run1", "getDecisions", args: .object(["limit": .string("all")]))
        #expect(bad.ok == false && bad.code == "badInput")

        // Once the broker has acknowledged every point, health says nothing is pending.
        try await broker.waitForHealth("filter", description: "filter health with nothing pending") { $0.processed >= 30 && $0.queueDepth == 0 }
    }

    @Test func diagnosticsFollowTheirSwitchesAndRetention() async throws {
        try await broker.waitUntilOnline("gateway", "filter")
        filter.stop()
        let quiet = try ServiceHarness(executable: "tracker-filter", broker: broker, config: [
            "healthIntervalSec": 0.2, "instance": "tracker-filter-quiet",
            "rejectionEvents": "off", "rawPoints": false, "retentionPerDevice": 100,
        ])
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/q1/events", "tracker/_health/filter"])
        try quiet.start()
        try await out.waitForHealth(description: "the configured instance online") { $0.instance == "tracker-filter-quiet" }
        let publisher = try await TestClient.connect(port: broker.port)
        for line in try Fixtures.lines("munich-drive.jsonl").prefix(600) {
            try publisher.publish(MQTTMessage(topic: "tracker/q1/fixes", string: line))
        }
        await publisher.drain()
        let decisions = try await waitForDecisions(publisher, device: "q1", count: 1, lastSeq: 600)
        // Retention: the log was trimmed at seq 512 to the newest 100, and has grown since.
        #expect(decisions.count < 600 && decisions.first?["seq"]?.int64Value == 413)
        let judged = try await TestClient.command(publisher, device: "q1", "getRawPoints")
        #expect(judged.ok == false && judged.code == "notReady")
        // Rejections happened (the decision log has them) but no rejection event was sent.
        #expect(decisions.contains { $0["accepted"]?.boolValue == false })
        #expect(!out.messages.contains { $0.string.contains("locationRejected") })
    }

    @Test func unreadableInternalMessagesGetErrorEvents() async throws {
        try await broker.waitUntilOnline("gateway", "filter")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/bad9/events"])
        let publisher = try await TestClient.connect(port: broker.port)
        try await publisher.publishAndWait(MQTTMessage(topic: "tracker/bad9/raw", string: #"{"seq":"one"}"#))
        try await publisher.publishAndWait(MQTTMessage(topic: "tracker/bad9/motion", string: "stationary"))
        let events = try await out.wait(description: "two errors") { $0.count >= 2 }
        let messages = events.compactMap { try? JSONCoding.decoder.decode(Event.self, from: Data($0.payload)) }
            .compactMap { e -> String? in if case .error("badInput", let m) = e.body { m } else { nil } }
        #expect(messages.contains { $0.hasPrefix("raw: unreadable internal message:") })
        #expect(messages.contains { $0.hasPrefix("motion: unreadable internal message:") })
        #expect(filter.process?.wait(timeout: 0) == nil)  // still running
    }

    @Test func killNineMidStreamGivesTheSamePoints() async throws {
        try await broker.waitUntilOnline("gateway", "filter")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/+/points", "tracker/+/raw"])
        let publisher = try await TestClient.connect(port: broker.port)
        let lines = Array(try Fixtures.lines("munich-drive.jsonl").prefix(600))
        for (index, line) in lines.enumerated() {
            try publisher.publish(MQTTMessage(topic: "tracker/m1/fixes", string: line))
            if index == 250 {
                await publisher.drain()
                try await out.wait(count: 50, topicSuffix: "/points")
                filter.kill9()
            }
            if index == 400 { await publisher.drain(); try filter.start() }
        }
        await publisher.drain()
        let decisions = try await waitForDecisions(publisher, device: "m1", count: 600)
        // The uninterrupted run: the same core, in one go, over the raw fixes the gateway published.
        var rawBySeq: [Int64: RawFix] = [:]
        for raw in out.decoded(RawFix.self, topicSuffix: "/raw") { rawBySeq[raw.seq] = raw }
        #expect(rawBySeq.count == 600)
        var state = DeviceFilterState()
        let core = FilterCore()
        let uninterrupted = core.judgeRecording(rawBySeq.keys.sorted().map { FilterInput(rawBySeq[$0]!) }, state: &state)
            .compactMap(\.verdict.point)
        let expectedSeqs = uninterrupted.map(\.seq)
        try await out.wait(timeout: 30, description: "all points") { all in
            Set(all.compactMap { try? JSONCoding.decoder.decode(PointMessage.self, from: Data($0.payload)).point.seq }).count >= expectedSeqs.count
        }
        let points = out.decoded(PointMessage.self, topicSuffix: "/points").map(\.point)
        var bySeq: [Int64: TrackPoint] = [:]
        for p in points {
            if let earlier = bySeq[p.seq] { #expect(earlier == p, "seq \(p.seq) published twice with different content") }
            bySeq[p.seq] = p
        }
        #expect(bySeq.keys.sorted() == expectedSeqs)
        // Not just the same fixes: the same filtered positions, speeds and odometer.
        #expect(bySeq.keys.sorted().map { bySeq[$0]! } == uninterrupted)
        // Decisions cover every seq exactly once.
        #expect(decisions.compactMap { $0["seq"]?.int64Value } == Array(1...600))
    }

    /// Polls the decision log (a command round trip each time) until it holds
    /// at least `count` rows, and its newest is `lastSeq` when given.
    func waitForDecisions(_ client: MQTTClient, device: String, count: Int, lastSeq: Int64? = nil) async throws -> [JSONValue] {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let reply = try await TestClient.command(client, device: device, "getDecisions", args: .object(["limit": .number(10_000)]))
            if let rows = reply.result?.arrayValue, rows.count >= count,
               lastSeq == nil || rows.last?["seq"]?.int64Value == lastSeq {
                return rows
            }
            await Task.yield()
        }
        throw TestSupportError("decision log never reached \(count) rows (last seq \(lastSeq.map(String.init) ?? "any"))")
    }
}
