import Bus
import Foundation
import Model
import TestSupport
import Testing
import TrackCore

/// Gateway, filter and track as real processes: City Run in, a track and a live frame out.
@Suite(.serialized) struct TrackEndToEndTests {
    let broker: TestBroker
    let services: [ServiceHarness]

    init() throws {
        let broker = try TestBroker()
        self.broker = broker
        services = try ["gateway", "filter", "track"].map { try .started($0, on: broker) }
    }

    @Test func cityRunBecomesOneMovingSegmentAndALiveFrame() async throws {
        try await broker.waitUntilOnline("gateway", "filter", "track")
        let client = try await TestClient.connect(port: broker.port)
        let session = try await TestClient.command(client, device: "run1", "start", args: .object(["tag": .string("city")]))
        let sessionID = try #require(session.result?["id"]?.stringValue)
        for line in try Fixtures.lines("city-run.jsonl") {
            try await client.publishAndWait(MQTTMessage(topic: "tracker/run1/fixes", string: line))
        }
        // The track service has stored what the filter accepted (26 of 30 on City Run).
        let live = try await MessageCollector(port: broker.port, filters: ["tracker/run1/live"])
        try await live.wait(description: "the last live frame") { all in
            all.contains { (try? JSONCoding.decoder.decode(LiveFrame.self, from: Data($0.payload)))?.session?.points ?? 0 >= 26 }
        }
        let built = try await TestClient.command(client, device: "run1", "buildTrack", args: .object(["sessionID": .string(sessionID)]))
        let track = try #require(try built.result?.decode(Track.self))
        #expect(track.segments.allSatisfy { $0.kind == .moving } && track.statistics.movingSegments >= 1)
        #expect((80...130).contains(track.statistics.observedDistanceM), "\(track.statistics.observedDistanceM)")
        let count = try await TestClient.command(client, device: "run1", "getCount", args: .object(["sessionID": .string(sessionID)]))
        #expect(count.result == .number(26))
        await live.close()
    }
}
