import Bus
import Foundation
import Model
import TestSupport
import Testing

/// The gateway as a real process against a real mosquitto.
@Suite(.serialized) struct GatewayEndToEndTests {
    let broker: TestBroker
    let gateway: ServiceHarness

    init() throws {
        broker = try TestBroker()
        gateway = try .started("gateway", on: broker)
    }

    func collector(_ filters: [String] = ["tracker/+/raw", "tracker/+/events"]) async throws -> MessageCollector {
        try await MessageCollector(port: broker.port, filters: filters)
    }

    func publish(_ client: MQTTClient, _ topic: String, _ payload: String) async throws {
        try await client.publishAndWait(MQTTMessage(topic: topic, string: payload))
    }

    @Test func cityRunComesOutAsThirtyRawFixesInOrder() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await collector()
        let publisher = try await TestClient.connect(port: broker.port)
        for line in try Fixtures.lines("city-run.jsonl") {
            try await publish(publisher, "tracker/city/fixes", line)
        }
        try await out.wait(count: 30, topicSuffix: "/raw")
        let raw = out.decoded(RawFix.self, topicSuffix: "/raw")
        #expect(raw.map(\.seq) == Array(1...30))
        #expect(raw.allSatisfy { $0.device.rawValue == "city" && $0.source == .device && $0.sessionID != nil })
        #expect(Set(raw.map(\.sessionID)).count == 1)
        let fixes = try Fixtures.fixes("city-run.jsonl")
        #expect(raw.map(\.timeMs) == fixes.map(\.timeMs))
        #expect(raw[0].speedMps == 1.54 && raw[0].courseDeg == nil)
        // The auto session was announced.
        #expect(out.events().contains { if case .sessionStarted = $0.body { true } else { false } })
    }

    @Test func everyBadInputGetsAnErrorAndTheGatewaySurvives() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await collector()
        let publisher = try await TestClient.connect(port: broker.port)
        let bad: [(String, String)] = [
            ("not json at all", "payload is not valid JSON"),
            ("", "payload is empty"),
            (String(repeating: "x", count: 1_048_576), "over the 262144-byte limit"),
            (#"{"t":"soon","lat":1,"lon":2,"acc":5}"#, "t: expected a number"),
            (#"{"t":1793197938,"lat":NaN,"lon":2,"acc":5}"#, "payload is not valid JSON"),
            (#"{"t":1793197938,"lat":1,"lon":Infinity,"acc":5}"#, "payload is not valid JSON"),
            (#"{"t":1793197938,"lon":2,"acc":5}"#, "lat: required field is missing"),
            (#"{"t":1793197938,"lat":1,"lon":2,"acc":-5}"#, "acc: -5.0 is negative"),
        ]
        for (payload, _) in bad { try await publish(publisher, "tracker/bad/fixes", payload) }
        // A batch with one bad element: the good ones pass; unknown fields are fine.
        try await publish(publisher, "tracker/bad/fixes", #"""
            [{"t":1793197938,"lat":1,"lon":2,"acc":5,"provider":"gps"},{"t":1793197939,"lat":100,"lon":2,"acc":5},{"t":1793197940,"lat":1,"lon":2,"acc":5}]
            """#)
        let errors = try await out.wait(description: "9 error events") { all in
            all.filter { $0.topic == "tracker/bad/events" && $0.string.contains(#""type":"error""#) }.count >= 9
        }.filter { $0.topic == "tracker/bad/events" }
        let messages = errors.compactMap { try? JSONCoding.decoder.decode(Event.self, from: Data($0.payload)) }
            .compactMap { e -> String? in if case .error(let code, let m) = e.body, code == "badInput" { m } else { nil } }
        for (_, expected) in bad {
            #expect(messages.contains { $0.contains(expected) }, "no error containing '\(expected)' in \(messages)")
        }
        #expect(messages.contains { $0.hasPrefix("[1] lat: 100.0") })
        try await out.wait(count: 2, topicSuffix: "/raw")
        #expect(out.decoded(RawFix.self, topicSuffix: "/raw").map(\.seq) == [1, 2])
        // Still alive and counting.
        #expect(gateway.process?.wait(timeout: 0) == nil)
    }

    @Test func invalidDeviceTopicsAreCountedInHealth() async throws {
        try await broker.waitUntilOnline("gateway")
        let publisher = try await TestClient.connect(port: broker.port)
        try await publish(publisher, "tracker/_reserved/fixes", #"{"t":1793197938,"lat":1,"lon":2,"acc":5}"#)
        try await publish(publisher, "tracker/bad id/fixes", #"{"t":1793197938,"lat":1,"lon":2,"acc":5}"#)
        try await broker.waitForHealth("gateway", description: "invalidTopic = 2") { $0.counters?["invalidTopic"] == 2 }
    }

    @Test func ownTracksLocationsBecomeRawFixes() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await collector()
        let publisher = try await TestClient.connect(port: broker.port)
        try await publish(publisher, "owntracks/alice/phone",
                          #"{"_type":"location","tst":1793197938,"lat":48.1,"lon":11.5,"acc":12,"vel":18,"cog":270,"batt":50}"#)
        try await publish(publisher, "owntracks/alice/phone", #"{"_type":"lwt","tst":1793197938}"#)
        try await out.wait(count: 1, topicSuffix: "/raw")
        let raw = out.decoded(RawFix.self, topicSuffix: "/raw")[0]
        #expect(raw.device.rawValue == "alice.phone" && raw.source == .ownTracks)
        #expect(raw.speedMps == 5 && raw.courseDeg == 270 && raw.batteryPct == 50)
        try await out.wait(description: "ignored diagnostic") { all in
            all.contains { $0.topic == "tracker/alice.phone/events" && $0.string.contains(#""code":"ignored""#) }
        }
    }

    /// The apps' variants as paho-mqtt sends them over MQTT 3.1.1 (QoS 1, retained
    /// locations): a location without `acc`, one with numbers in strings, one
    /// from an e-mail user's device with a space and an apostrophe, a
    /// transition, the regions, and the empty payload that clears a retained one.
    @Test func ownTracksVariantsFromAnMQTT311AppArriveAsTheContractSays() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await collector()
        let now = Int(Date().timeIntervalSince1970)
        let messages: [[Any]] = [
            ["owntracks/alice/phone", #"{"_type":"location","tid":"ph","lat":48.137,"lon":11.575,"tst":\#(now - 3)}"#, true],
            ["owntracks/alice/phone", #"{"_type":"location","lat":"48.1","lon":"11.5","acc":"8","vel":"36","tst":"\#(now - 2)"}"#, true],
            ["owntracks/jane@example.com/Jane's iPhone", #"{"_type":"location","lat":48.2,"lon":11.6,"acc":5,"tst":\#(now - 1)}"#, true],
            ["owntracks/alice/phone/event", #"{"_type":"transition","event":"enter","desc":"Home","lat":48.137,"lon":11.575,"acc":12,"tst":\#(now),"wtst":\#(now - 3600),"t":"c"}"#, false],
            ["owntracks/alice/phone/waypoints", #"{"_type":"waypoints","waypoints":[{"_type":"waypoint","desc":"Home","lat":48.137,"lon":11.575,"rad":100,"tst":\#(now - 3600)},{"_type":"waypoint","desc":"Work","lat":48.15,"lon":11.58,"rad":250,"tst":\#(now - 3000)}]}"#, false],
            ["owntracks/alice/phone", "", true],
        ]
        let file = broker.directory.appendingPathComponent("owntracks-variants.json")
        try JSONSerialization.data(withJSONObject: messages).write(to: file)
        let app = try ChildProcess(executable: "/usr/bin/python3",
                                   arguments: [Repository.root.appendingPathComponent("Tests/Clients/owntracks_publish.py").path, "127.0.0.1",
                                               "\(broker.port)", "alice-app", file.path],
                                   logFile: broker.directory.appendingPathComponent("owntracks-variants.log").path)
        #expect(app.wait(timeout: 60) == 0, "\(app.log)")
        #expect(app.log.contains(#""acknowledged": true"#), "\(app.log)")
        try await out.wait(count: 3, topicSuffix: "/raw")
        let jane = "jane_40example_2ecom_2fJane_27s_20iPhone"
        try await out.wait(description: "the transition, the regions and jane's device") { all in
            all.contains { $0.string.contains(#""type":"regionTransition""#) } && all.contains { $0.string.contains("ownTracksRegions") }
                && all.contains { $0.topic == "tracker/\(jane)/events" && $0.string.contains("ownTracksDevice") }
        }
        let raw = out.decoded(RawFix.self, topicSuffix: "/raw")
        #expect(raw.map(\.device.rawValue) == ["alice.phone", "alice.phone", jane])
        #expect(raw.map(\.timeMs) == [now - 3, now - 2, now - 1].map { Int64($0) * 1000 })
        #expect(raw[0].accuracyM == 10, "no acc: the documented default")
        #expect(raw[1].latitude == 48.1 && raw[1].longitude == 11.5 && raw[1].accuracyM == 8 && raw[1].speedMps == 10)
        #expect(raw[2].latitude == 48.2 && raw[2].source == .ownTracks)
        let events = out.events()
        let transition = try #require(events.compactMap { $0.body.asRegionTransition }.first)
        #expect(transition == RegionTransition(region: "Home", event: .enter, timeMs: Int64(now) * 1000, latitude: 48.137, longitude: 11.575,
                                               accuracyM: 12, trigger: "c"))
        let said = events.compactMap { e -> String? in if case .diagnostic(let code, let m) = e.body { "\(e.device) \(code): \(m)" } else { nil } }
        #expect(said.contains("alice.phone ownTracksRegions: the app's regions (2), stored (not armed as geofences: ownTracksGeofences is off): "
                              + "'Home' 48.13700,11.57500 r 100 m, 'Work' 48.15000,11.58000 r 250 m"), "\(said)")
        #expect(said.contains("\(jane) ownTracksDevice: OwnTracks user 'jane@example.com', device 'Jane's iPhone' is device \(jane)"), "\(said)")
        #expect(!events.contains { if case .error = $0.body { true } else { false } }, "\(events)")
        // The empty retained payload: counted, nothing said.
        try await broker.waitForHealth("gateway", description: "emptyIgnored = 1") { $0.counters?["emptyIgnored"] == 1 }
    }

    @Test func exactDuplicatesAreDroppedWithADiagnostic() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await collector()
        let publisher = try await TestClient.connect(port: broker.port)
        let fix = #"{"t":1793197938.5,"lat":1,"lon":2,"acc":5}"#
        try await publish(publisher, "tracker/dup/fixes", fix)
        try await publish(publisher, "tracker/dup/fixes", fix)
        try await publish(publisher, "tracker/dup/fixes", #"{"t":1793197939.5,"lat":1,"lon":2,"acc":5}"#)
        try await out.wait(count: 2, topicSuffix: "/raw")
        try await out.wait(description: "duplicate diagnostic") { all in all.contains { $0.string.contains("duplicateFix") } }
        #expect(out.decoded(RawFix.self, topicSuffix: "/raw").map(\.seq) == [1, 2])
    }

    @Test func sessionCommandsFollowTheContract() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await collector()
        let client = try await TestClient.connect(port: broker.port)
        let stopNone = try await TestClient.command(client, device: "van7", "stop")
        #expect(stopNone.ok == false && stopNone.code == "notReady")

        let started = try await TestClient.command(client, device: "van7", "start", args: .object(["tag": .string("route 7")]))
        #expect(started.ok)
        let sessionID = try #require(started.result?["id"]?.stringValue)
        #expect(started.result?["tag"]?.stringValue == "route 7")
        #expect(try await TestClient.command(client, device: "van7", "currentSession").result?["id"]?.stringValue == sessionID)

        for line in try Fixtures.lines("city-run.jsonl").prefix(5) { try await publish(client, "tracker/van7/fixes", line) }
        try await out.wait(count: 5, topicSuffix: "/raw")
        #expect(out.decoded(RawFix.self, topicSuffix: "/raw").allSatisfy { $0.sessionID == sessionID })

        let raw = try await TestClient.command(client, device: "van7", "getRawFixes",
                                               args: .object(["sessionID": .string(sessionID), "limit": .number(3), "offset": .number(1)]))
        #expect(raw.result?.arrayValue?.map { $0["seq"]?.int64Value } == [2, 3, 4])

        let fixture = try await TestClient.command(client, device: "van7", "exportFixture",
                                                   args: .object(["sessionID": .string(sessionID), "name": .string("van7-run")]))
        let jsonl = try #require(fixture.result?["jsonl"]?.stringValue)
        let exported = jsonl.split(separator: "\n").map { try? JSONCoding.decoder.decode(DeviceFix.self, from: Data($0.utf8)) }
        #expect(exported.compactMap { $0 } == Array(try Fixtures.fixes("city-run.jsonl").prefix(5)).map {
            DeviceFix(t: Double($0.timeMs) / 1000, lat: $0.lat, lon: $0.lon, acc: $0.acc,
                      speed: $0.speed.flatMap { $0 < 0 ? nil : $0 }, course: $0.course.flatMap { $0 < 0 ? nil : $0 }, alt: $0.alt)
        })

        let stopped = try await TestClient.command(client, device: "van7", "stop")
        #expect(stopped.ok && stopped.result?["endMs"]?.int64Value != nil)
        let sessions = try await TestClient.command(client, device: "van7", "getSessions")
        #expect(sessions.result?.arrayValue?.count == 1)
        let none = try await TestClient.command(client, device: "van7", "currentSession")
        #expect(none.ok && (none.result == nil || none.result == .null))

        let missing = try await TestClient.command(client, device: "van7", "getRawFixes", args: .object(["sessionID": .string("nope")]))
        #expect(missing.code == "notFound")
        let badPage = try await TestClient.command(client, device: "van7", "getRawFixes", args: .object(["limit": .number(0)]))
        #expect(badPage.code == "badInput")
        let unknown = try await TestClient.command(client, device: "van7", "fly")
        #expect(unknown.code == "notFound")
        try await out.wait(description: "session events") { all in
            all.contains { $0.string.contains("sessionStopped") } && all.contains { $0.string.contains("sessionStarted") }
        }
    }

    @Test func anAutoSessionClosesWhenItsDeviceFallsSilent() async throws {
        gateway.stop()
        let quiet = try ServiceHarness(executable: "tracker-gateway", broker: broker,
                                       config: ["healthIntervalSec": 0.2, "sessionIdleTimeoutSec": 1, "instance": "tracker-gateway-quiet"])
        let out = try await collector(["tracker/quiet1/events", "tracker/_health/gateway"])
        try quiet.start()
        try await out.waitForHealth(description: "the quiet instance online") { $0.instance == "tracker-gateway-quiet" }
        let publisher = try await TestClient.connect(port: broker.port)
        try await publisher.publishAndWait(MQTTMessage(topic: "tracker/quiet1/fixes", string: #"{"t":1793197938,"lat":1,"lon":2,"acc":5}"#))
        let events = try await out.wait(timeout: 20, description: "sessionStopped after 1 s of silence") { all in
            all.contains { $0.string.contains("sessionStopped") }
        }
        let stopped = events.compactMap { try? JSONCoding.decoder.decode(Event.self, from: Data($0.payload)) }
            .compactMap { e -> Session? in if case .sessionStopped(let s) = e.body { s } else { nil } }
        #expect(stopped.first?.auto == true && stopped.first?.endMs == 1_793_197_938_000)
    }

    @Test func mqtt311ClientsGetRepliesOnTheReplyTopic() async throws {
        try await broker.waitUntilOnline("gateway")
        let client = try await TestClient.connect(port: broker.port, protocolVersion: .v311)
        let replies = try await MessageCollector(port: broker.port, filters: ["tracker/old1/reply/+"])
        try await client.publishAndWait(MQTTMessage(topic: "tracker/old1/cmd/currentSession", string: #"{"id":"abc"}"#))
        let got = try await replies.wait(count: 1, topicSuffix: "/reply/currentSession")
        let reply = try JSONCoding.decoder.decode(CommandReply.self, from: Data(got[0].payload))
        #expect(reply.id == .string("abc") && reply.ok)
        // A request that is not JSON still gets an answer.
        try await client.publishAndWait(MQTTMessage(topic: "tracker/old1/cmd/start", string: "{oops"))
        let second = try await replies.wait(count: 1, topicSuffix: "/reply/start")
        #expect((try JSONCoding.decoder.decode(CommandReply.self, from: Data(second[0].payload))).code == "badInput")
    }

    @Test func reconnectsAndResubscribesAfterTheBrokerRestarts() async throws {
        try await broker.waitUntilOnline("gateway")
        try broker.restart()
        // The restarted broker has no session and no retained health: the
        // gateway must reconnect and subscribe again by itself.
        let out = try await collector(["tracker/+/raw", "tracker/_health/gateway"])
        try await out.wait(timeout: 30, description: "gateway back online") { all in
            all.contains { $0.topic.hasSuffix("/gateway") && $0.string.contains(#""status":"online""#) }
        }
        let publisher = try await TestClient.connect(port: broker.port)
        // This broker keeps no session across its restart: a fix sent before the
        // gateway's re-subscription reaches the broker has nowhere to wait (the
        // product's broker is persistent). What is checked is that the gateway
        // subscribes again by itself: the fix is offered until one comes through.
        var t = 1_793_197_938
        var arrived = false
        for _ in 0..<10 where !arrived {
            try await publisher.publishAndWait(MQTTMessage(topic: "tracker/back/fixes", string: #"{"t":\#(t),"lat":1,"lon":2,"acc":5}"#))
            t += 1
            arrived = (try? await out.wait(count: 1, topicSuffix: "/raw", timeout: 2)) != nil
        }
        if !arrived { print("gateway log:", gateway.log.suffix(3000)) }
        #expect(arrived)
        #expect(out.decoded(RawFix.self, topicSuffix: "/raw").first?.device.rawValue == "back")
    }

    @Test func lastWillMarksAKilledGatewayOffline() async throws {
        try await broker.waitUntilOnline("gateway")
        let health = try await collector(["tracker/_health/gateway"])
        gateway.kill9()
        try await health.waitForHealth(timeout: 60, description: "offline will") { $0.status == .offline }
    }

    @Test func sigtermStopsGracefullyWithOfflineHealth() async throws {
        try await broker.waitUntilOnline("gateway")
        let health = try await collector(["tracker/_health/gateway"])
        #expect(gateway.stop() == 0)
        try await health.waitForHealth(description: "offline") { $0.status == .offline }
    }

    @Test func seqSurvivesKillNineInTheMiddleOfAReplay() async throws {
        try await broker.waitUntilOnline("gateway")
        let out = try await collector(["tracker/+/raw"])
        let publisher = try await TestClient.connect(port: broker.port)
        let lines = try Fixtures.lines("munich-drive.jsonl")
        // The gateway's persistent session queues what arrives while it is down.
        for (index, line) in lines.enumerated() {
            try publisher.publish(MQTTMessage(topic: "tracker/munich/fixes", string: line))
            if index == 400 {
                await publisher.drain()
                try await out.wait(count: 100, topicSuffix: "/raw")
                gateway.kill9()
            }
            if index == 700 {
                await publisher.drain()
                try gateway.start()
            }
        }
        await publisher.drain()
        try await out.wait(timeout: 60, description: "every seq 1…\(lines.count)") { all in
            Set(all.compactMap { try? JSONCoding.decoder.decode(RawFix.self, from: Data($0.payload)).seq }).count >= lines.count
        }
        let raw = out.decoded(RawFix.self, topicSuffix: "/raw")
        // Nothing lost, nothing numbered twice: a republished fix keeps its seq.
        var bySeq: [Int64: Int64] = [:]
        for fix in raw {
            if let time = bySeq[fix.seq] { #expect(time == fix.timeMs, "seq \(fix.seq) reused") }
            bySeq[fix.seq] = fix.timeMs
        }
        #expect(bySeq.keys.sorted() == Array(1...Int64(lines.count)))
        #expect(Set(bySeq.values).count == lines.count)
    }
}
