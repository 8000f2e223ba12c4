import Bus
import Foundation
@testable import Gateway
import GatewayCore
import TrackerLog
import Model
@testable import Runtime
import Store
import TestSupport
import Testing

/// The gateway's definition on the host, in process, on a manual clock.
@Suite struct GatewayHostTests {
    let bus = RecordingBus()
    let clock = ManualClock()
    let counters = HealthCounters()
    let database = TemporaryDatabase("gw")

    func host(idleTimeoutSec: Double = 60, topics: Topics = Topics(), settings: [String: JSONValue] = [:]) throws -> ServiceHost<GatewayRow> {
        let reader = SettingsReader(values: settings.merging(["sessionIdleTimeoutSec": .number(idleTimeoutSec)]) { $1 }, source: "test")
        return try .inProcess(GatewayService.definition(try GatewaySettings(reader)), path: database.path, bus: bus, clock: clock,
                              topics: topics, counters: counters)
    }

    func reply(on topic: String) throws -> CommandReply? {
        try bus.messages.last { $0.topic == topic }.map { try JSONDecoder().decode(CommandReply.self, from: Data($0.payload)) }
    }

    func fix(_ t: Double) -> MQTTMessage {
        MQTTMessage(topic: "tracker/van1/fixes", string: #"{"t":\#(t),"lat":48.1,"lon":11.5,"acc":5}"#)
    }

    func sessionEvents() -> [String] {
        bus.events().compactMap { if case .sessionStarted = $0.body { "started" } else if case .sessionStopped = $0.body { "stopped" } else { nil } }
    }

    @Test func anAutoSessionClosesWhenItsDeviceFallsSilentOnTheWallClock() throws {
        let gateway = try host(idleTimeoutSec: 60)
        let t = Double(clock.nowMs()) / 1000
        for i in 0..<3 { gateway.receive(fix(t + Double(i))) }
        #expect(gateway.commit())
        #expect(sessionEvents() == ["started"])
        // 59 s of silence: still open. 61 s: the sweep closes it — no real time passes.
        clock.advance(by: .seconds(59))
        gateway.tick(); #expect(gateway.commit())
        #expect(sessionEvents() == ["started"])
        clock.advance(by: .seconds(2))
        gateway.tick(); #expect(gateway.commit())
        #expect(sessionEvents() == ["started", "stopped"])
        // Swept once: later ticks find nothing more to close.
        clock.advance(by: .seconds(600))
        gateway.tick(); #expect(gateway.commit())
        #expect(sessionEvents() == ["started", "stopped"])
    }

    @Test func theIdleSweepReadsASliceOfTheFleetEachSecondAndEveryRowWithinItsInterval() throws {
        // A 20-minute idle timeout: every row is looked at within 20 s, a twentieth of them a second.
        let gateway = try host(idleTimeoutSec: 1_200)
        let t = Double(clock.nowMs()) / 1000
        for d in 0..<100 { gateway.receive(MQTTMessage(topic: "tracker/van\(d)/fixes", string: #"{"t":\#(t),"lat":48.1,"lon":11.5,"acc":5}"#)) }
        #expect(gateway.commit())
        func stopped() -> Int { sessionEvents().filter { $0 == "stopped" }.count }
        clock.advance(by: .seconds(1_201))
        var perTick: [Int] = []
        for _ in 0..<20 {
            let before = stopped()
            gateway.tick(); #expect(gateway.commit())
            perTick.append(stopped() - before)
            clock.advance(by: .seconds(1))
        }
        #expect(stopped() == 100, "every idle session closed within the interval")
        #expect(perTick.allSatisfy { $0 <= 5 }, "no tick read more than its slice: \(perTick)")
        gateway.tick(); #expect(gateway.commit())
        #expect(stopped() == 100)
    }

    @Test func aDeviceKeepsItsNewestSessionsUpToSessionsPerDevice() throws {
        let gateway = try host(idleTimeoutSec: 60, settings: ["sessionsPerDevice": .number(10)])
        // Two minutes apart with a minute's idle timeout: every fix opens a session.
        var starts: [Int64] = []
        for i in 0..<15 {
            let t = Double(clock.nowMs()) / 1000
            starts.append(clock.nowMs())
            gateway.receive(fix(t))
            if i < 2 { gateway.receive(MQTTMessage(topic: "tracker/van2/fixes", string: #"{"t":\#(t),"lat":48.1,"lon":11.5,"acc":5}"#)) }
            #expect(gateway.commit())
            clock.advance(by: .seconds(120))
        }
        #expect(sessionEvents().filter { $0 == "started" }.count == 17)
        let db = try Database(path: database.path, readOnly: true)
        let kept = try GatewayStore.sessions(db, DeviceID("van1")!, fromMs: nil, toMs: nil)
        #expect(kept.map(\.startMs) == Array(starts.suffix(10)))
        #expect(try GatewayStore.sessions(db, DeviceID("van2")!, fromMs: nil, toMs: nil).count == 2)
    }

    @Test func rawFixesCarryTheStoreEpochAndSeqsFromOne() throws {
        let gateway = try host()
        let t = Double(clock.nowMs()) / 1000
        gateway.receive(fix(t))
        gateway.receive(MQTTMessage(topic: "tracker/van1/fixes", string: "[\(fix(t + 1).string),\(fix(t + 1).string)]"))
        #expect(gateway.commit())
        let raw = bus.decoded(RawFix.self, topicSuffix: "/raw")
        #expect(raw.map(\.seq) == [1, 2])
        #expect(Set(raw.map(\.epoch)) == [gateway.epoch])
        // The same fix twice in one array: dropped once, loudly.
        #expect(bus.messages(topicSuffix: "/events").contains { $0.string.contains("duplicateFix") })
    }

    @Test func aRowThatCannotBeReadIsSetAsideAndItsDeviceNumbersOnWithoutStallingTheFleet() throws {
        let t = Double(clock.nowMs()) / 1000
        func van2(_ t: Double) -> MQTTMessage { MQTTMessage(topic: "tracker/van2/fixes", string: #"{"t":\#(t),"lat":48.1,"lon":11.5,"acc":5}"#) }
        func setAside(_ said: [Event]) -> [Event] { said.filter { $0.diagnosticCode == "stateSetAside" } }
        do {
            let gateway = try host(idleTimeoutSec: 60)
            gateway.receive(van2(t))
            for i in 0..<3 { gateway.receive(fix(t + Double(i))); clock.advance(by: .seconds(1)) }
            #expect(gateway.commit())
            gateway.close()
        }
        let session = try #require(bus.decoded(RawFix.self, topicSuffix: "van1/raw").last?.sessionID)
        let session2 = try #require(bus.decoded(RawFix.self, topicSuffix: "van2/raw").last?.sessionID)
        // What the stored tables tell of the device's sessions, for a row that cannot be read.
        let told = try GatewayStore(db: Database(path: database.path), sessionsPerDevice: 10, sessionsTotal: 100).sessionsFromTables(of: DeviceID("van1")!)
        #expect(told.current?.id == session)
        #expect(told.lastFixMs == Int64((t + 2) * 1000))
        #expect(told.lastReceivedMs == Int64((t + 2) * 1000), "the newest arrival, not the first")
        // As a newer release leaves it (version 9), after a downgrade.
        let unreadable: [UInt8] = [0xF1, 9, 7, 7]
        try Database(path: database.path).run("UPDATE host_devices SET row = ? WHERE device IN ('van1', 'van2')", .blob(unreadable))
        bus.clear()

        let gateway = try host(idleTimeoutSec: 60)
        gateway.receive(fix(t + 3))
        #expect(gateway.commit(), "the batch is stored, not redelivered for ever")
        let van1 = bus.decoded(RawFix.self, topicSuffix: "van1/raw")
        #expect(van1.map(\.seq) == [4], "numbering goes on after the last raw fix sent")
        #expect(van1.first?.sessionID == session, "the open session goes on")
        // Two minutes after van2's last fix, past the idle timeout its session was opened with: a new one.
        clock.advance(by: .seconds(120))
        gateway.receive(van2(t + 123))
        #expect(gateway.commit())
        let after = bus.decoded(RawFix.self, topicSuffix: "van2/raw")
        #expect(after.map(\.seq) == [2])
        #expect(after.first?.sessionID != session2, "its newest fix's time came back with the session, so the idle gap counts")
        #expect(setAside(bus.events()).map(\.device) == [DeviceID("van1")!, DeviceID("van2")!])
        #expect(counters.snapshot().extra["rowsSetAside"] == 2)
        let db = try Database(path: database.path, readOnly: true)
        let kept = try db.first("SELECT device, row, error FROM host_set_aside WHERE device = 'van1'") { ($0.string(0), Array($0.data(1)), $0.string(2)) }
        #expect(kept?.1 == unreadable, "kept as it was")
        #expect(kept?.2.contains("newer") == true)

        // Written over with a row this release reads: nothing set aside again.
        gateway.close()
        bus.clear()
        do {
            let again = try host(idleTimeoutSec: 60)
            again.receive(fix(t + 124))
            #expect(again.commit())
            again.close()
        }
        #expect(bus.decoded(RawFix.self, topicSuffix: "van1/raw").map(\.seq) == [5])
        #expect(setAside(bus.events()).isEmpty)
        // Damaged once more: the first row set aside is the one kept, and the diagnostic says so.
        try Database(path: database.path).run("UPDATE host_devices SET row = x'F10800' WHERE device = 'van1'")
        bus.clear()
        let third = try host(idleTimeoutSec: 60)
        defer { third.close() }
        third.receive(fix(t + 125))
        #expect(third.commit())
        #expect(bus.decoded(RawFix.self, topicSuffix: "van1/raw").map(\.seq) == [6])
        #expect(try db.first("SELECT row FROM host_set_aside WHERE device = 'van1'") { Array($0.data(0)) } == unreadable)
        #expect(setAside(bus.events()).first.map { "\($0.body)".contains("an earlier unreadable one is kept") } == true)
    }

    @Test func repliesNeverGoToInternalTopics() throws {
        let gateway = try host()
        gateway.receive(MQTTMessage(topic: "tracker/van1/cmd/currentSession", payload: [], responseTopic: "tracker/van2/raw"))
        #expect(gateway.commit())
        #expect(bus.messages(topicSuffix: "/raw").isEmpty)
        // The refusal goes to the contract's reply topic instead.
        #expect(try reply(on: "tracker/van1/reply/currentSession")?.code == "badInput")
    }

    @Test func everyCommandIsAnsweredEvenUnreadableOnesToUnknownNames() throws {
        let gateway = try host()
        for (name, payload) in [("noSuchThing", "{not json"), ("noSuchThing", #"{"id":"u1"}"#), ("start", "[1,")] {
            bus.clear()
            gateway.receive(MQTTMessage(topic: "tracker/van1/cmd/\(name)", payload: Array(payload.utf8), responseTopic: "tracker/van1/reply/x"))
            #expect(gateway.commit())
            let answer = try #require(try reply(on: "tracker/van1/reply/x"), "\(name) \(payload)")
            #expect(answer.ok == false && (answer.code == "notFound" || answer.code == "badInput"), "\(answer)")
            if name == "noSuchThing" { #expect(answer.code == "notFound") }
        }
    }

    @Test func aReplyGoesOnlyWhereTheAskerMayReadIt() throws {
        let gateway = try host()
        for (topic, allowed) in [("tracker/van1/reply/a", true), ("tracker/_ctl/ops-1/reply", true), ("tracker/_map/tracker-map/k3y/reply", true),
                                 ("tracker/van2/reply/a", false), ("evil/x", false), ("$SYS/broker/x", false), ("tracker/van1/events", false),
                                 ("tracker/van1/reply", false), ("tracker//reply/a", false), ("tracker/_map/reply", false)] {
            bus.clear()
            gateway.receive(MQTTMessage(topic: "tracker/van1/cmd/currentSession", payload: [], responseTopic: topic))
            #expect(gateway.commit())
            if allowed {
                #expect(try reply(on: topic)?.ok == true, "\(topic)")
            } else {
                #expect(bus.messages.allSatisfy { $0.topic != topic }, "\(topic)")
                #expect(try reply(on: "tracker/van1/reply/currentSession")?.code == "badInput", "\(topic)")
            }
        }
    }

    @Test func aCommandToAnInvalidDeviceIdIsAnswered() throws {
        let gateway = try host()
        gateway.receive(MQTTMessage(topic: "tracker/bad id!/cmd/start", payload: Array(#"{"id":"r1"}"#.utf8), responseTopic: "tracker/_ctl/app/replies"))
        #expect(gateway.commit())
        let answer = try #require(try reply(on: "tracker/_ctl/app/replies"))
        #expect(answer.code == "badInput" && answer.id == .string("r1") && answer.message?.contains("not a device id") == true)
    }

    @Test func errorEventsNameTheProblemWithoutEchoingTheInput() throws {
        let gateway = try host()
        let huge = String(repeating: "x", count: 100_000)
        gateway.receive(MQTTMessage(topic: "owntracks/u1/phone", string: #"{"_type":"\#(huge)"}"#))
        #expect(gateway.commit())
        let event = try #require(bus.messages(topicSuffix: "/events").last)
        #expect(event.payload.count < 1_000)
    }

    @Test func theOwnTracksTopicIsTheDeploymentsOwn() throws {
        let gateway = try host(topics: Topics(prefix: "tracker", ownTracksPrefix: "ot-b"))
        #expect(gateway.subscriptions.contains("ot-b/+/+") && !gateway.subscriptions.contains("owntracks/+/+"))
        let t = Double(clock.nowMs()) / 1000
        gateway.receive(MQTTMessage(topic: "ot-b/u1/phone", string: #"{"_type":"location","tst":\#(t),"lat":1,"lon":2,"acc":5}"#))
        gateway.receive(MQTTMessage(topic: "owntracks/u1/phone", string: #"{"_type":"location","tst":\#(t),"lat":1,"lon":2,"acc":5}"#))
        #expect(gateway.commit())
        #expect(bus.messages(topicSuffix: "/raw").map(\.topic) == ["tracker/u1.phone/raw"])
    }

    @Test func badFixesCountAsErrorsInHealth() throws {
        let gateway = try host()
        gateway.receive(MQTTMessage(topic: "tracker/van1/fixes", string: #"[{"t":1,"lat":1,"lon":2,"acc":5},{"lat":91}]"#))
        #expect(gateway.commit())
        #expect(counters.snapshot().errors == 2)
        #expect(counters.snapshot().extra["badInput"] == 2)
    }

    func ownTracksLocation(_ t: Double) -> String { #"{"_type":"location","tst":\#(t),"lat":48.1,"lon":11.5,"acc":5}"# }

    func diagnostics(_ code: String) -> [String] {
        bus.events().compactMap { if case .diagnostic(code, let m) = $0.body { m } else { nil } }
    }

    func errors(_ code: String) -> [(DeviceID, String)] {
        bus.events().compactMap { e in if case .error(code, let m) = e.body { (e.device, m) } else { nil } }
    }

    @Test func everyNameTheAppsAllowIsADeviceWithItsNamesKept() throws {
        let gateway = try host()
        let t = Double(clock.nowMs()) / 1000
        gateway.receive(MQTTMessage(topic: "owntracks/jane@example.com/Jane's iPhone", string: ownTracksLocation(t)))
        gateway.receive(MQTTMessage(topic: "owntracks/jane@example.com/Jane's iPhone", string: ownTracksLocation(t + 1)))
        gateway.receive(MQTTMessage(topic: "owntracks/alice/phone", string: ownTracksLocation(t)))
        #expect(gateway.commit())
        let raw = bus.decoded(RawFix.self, topicSuffix: "/raw")
        #expect(raw.map(\.device.rawValue) == ["jane_40example_2ecom_2fJane_27s_20iPhone", "jane_40example_2ecom_2fJane_27s_20iPhone", "alice.phone"])
        #expect(raw.map(\.seq) == [1, 2, 1])
        // Said once per device, with the names as they came.
        #expect(diagnostics("ownTracksDevice") == [
            "OwnTracks user 'jane@example.com', device 'Jane's iPhone' is device jane_40example_2ecom_2fJane_27s_20iPhone",
            "OwnTracks user 'alice', device 'phone' is device alice.phone",
        ])
        // And stored with the device: the id of a hashed name gives them back through the gateway's table.
        let store = try GatewayStore(db: try Database(path: database.path, readOnly: true))
        let owner = try #require(try store.owner(of: DeviceID("jane_40example_2ecom_2fJane_27s_20iPhone")!))
        #expect(owner.account == "jane@example.com" && owner.name == "Jane's iPhone")
    }

    @Test func namesThatShareAPlainIdOrAreEmptyAreRefusedLoudly() throws {
        let gateway = try host()
        let t = Double(clock.nowMs()) / 1000
        gateway.receive(MQTTMessage(topic: "owntracks/a.b/c", string: ownTracksLocation(t)))
        gateway.receive(MQTTMessage(topic: "owntracks/a/b.c", string: ownTracksLocation(t + 1)))
        gateway.receive(MQTTMessage(topic: "owntracks//phone", string: ownTracksLocation(t)))
        gateway.receive(MQTTMessage(topic: "owntracks/u1/", string: ownTracksLocation(t)))
        #expect(gateway.commit())
        #expect(bus.decoded(RawFix.self, topicSuffix: "/raw").map(\.timeMs) == [Int64(t * 1000)])
        let conflicts = errors("conflict")
        #expect(conflicts.count == 1 && conflicts.first?.0.rawValue == "a.b.c", "\(conflicts)")
        #expect(conflicts.first?.1.contains("owntracks/a/b.c maps to device a.b.c, which is owntracks/a.b/c's already") == true)
        let empty = errors("badInput")
        #expect(empty.map(\.0.rawValue) == ["-_2fphone", "u1_2f"], "\(empty)")
        #expect(empty.first?.1.contains("has an empty user name") == true && empty.last?.1.contains("has an empty device name") == true)
        #expect(counters.snapshot().extra["conflict"] == 1)
    }

    @Test func eachOwnTracksTypeDoesWhatTheContractSays() throws {
        let gateway = try host()
        let t = Int64(clock.nowMs() / 1000)
        let base = "owntracks/jane/phone"
        for (topic, payload) in [
            (base + "/event", #"{"_type":"transition","event":"enter","desc":"Home","lat":48.137,"lon":11.575,"acc":12,"tst":\#(t),"wtst":1700000000,"t":"c","rid":"6da9cf"}"#),
            (base + "/event", #"{"_type":"transition","event":"leave","desc":"Work","tst":"\#(t + 1)"}"#),
            (base + "/event", #"{"_type":"transition","event":"arrive","desc":"Home","tst":\#(t)}"#),
            (base + "/waypoint", #"{"_type":"waypoint","desc":"Home","lat":48.137,"lon":11.575,"rad":100,"tst":1700000000}"#),
            (base + "/waypoints", #"{"_type":"waypoints","waypoints":[{"_type":"waypoint","desc":"Home","lat":48.137,"lon":11.575,"rad":100,"tst":1},{"_type":"waypoint","desc":"Gym","tst":2}]}"#),
            (base, #"{"_type":"lwt","tst":\#(t)}"#),
            (base + "/cmd", #"{"_type":"cmd","action":"reportLocation"}"#),
            (base + "/info", #"{"_type":"card","name":"Jane"}"#),
            (base + "/waypoint", ""), (base, " "),
        ] { gateway.receive(MQTTMessage(topic: topic, string: payload)) }
        #expect(gateway.commit())
        let transitions = bus.events().compactMap { e in e.body.asRegionTransition.map { (e, $0) } }
        #expect(transitions.map(\.1) == [
            RegionTransition(region: "Home", event: .enter, timeMs: t * 1000, latitude: 48.137, longitude: 11.575, accuracyM: 12, regionID: "6da9cf", trigger: "c"),
            RegionTransition(region: "Work", event: .leave, timeMs: (t + 1) * 1000),
        ])
        #expect(transitions.allSatisfy { $0.0.type == "regionTransition" && $0.0.device.rawValue == "jane.phone" && $0.0.timeMs == $0.1.timeMs })
        // The wire form a consumer reads.
        let wire = try #require(bus.messages(topicSuffix: "/events").first { $0.string.contains("regionTransition") }?.string)
        #expect(wire.contains(#""transition":{"accuracyM":12,"event":"enter","latitude":48.137,"longitude":11.575,"region":"Home","regionID":"6da9cf","timeMs":\#(t * 1000),"trigger":"c"}"#), "\(wire)")
        #expect(errors("badInput").map(\.1) == ["event: 'arrive' is neither enter nor leave"])
        #expect(diagnostics("ownTracksRegions") == [
            "the app's region, stored (not armed as geofences: ownTracksGeofences is off): 'Home' 48.13700,11.57500 r 100 m",
            "the app's regions (2), stored (not armed as geofences: ownTracksGeofences is off): 'Home' 48.13700,11.57500 r 100 m, 'Gym'",
        ])
        #expect(diagnostics("ignored") == [
            "OwnTracks lwt: the broker says the app's connection was lost; not a fix",
            "OwnTracks _type 'card' on 'info' is not used; ignored",
        ])
        // Empty payloads, and commands to the app (its own cmd topic), are counted; nothing is said.
        let extra = counters.snapshot().extra
        #expect(extra["emptyIgnored"] == 2 && extra["regionTransitions"] == 2 && extra["regions"] == 2 && extra["ignored"] == 2
                && extra["appCommands"] == 1, "\(extra)")
        #expect(bus.messages.allSatisfy { !$0.topic.contains("/cmd/") }, "regions are not armed with ownTracksGeofences off")
        #expect(bus.messages(topicSuffix: "/raw").isEmpty)
    }

    func waypoint(_ desc: String, rid: String, lat: Double? = 48.137, rad: Double = 100) -> String {
        let place = lat.map { #","lat":\#($0),"lon":11.575,"rad":\#(rad)"# } ?? ""
        return #"{"_type":"waypoint","desc":"\#(desc)","rid":"\#(rid)","tst":1700000000\#(place)}"#
    }

    /// The geofence commands the gateway sent the motion service: `add ot-…` / `remove ot-…`.
    func fenceCommands() throws -> [String] {
        try bus.messages.filter { $0.topic.hasPrefix("tracker/jane.phone/cmd/") }.map { message in
            let request = try JSONDecoder().decode(CommandRequest.self, from: Data(message.payload))
            guard case .string(let id) = request.args?["id"], request.id == .string("ownTracks:\(id)") else { return "?" }
            return (message.topic.hasSuffix("addGeofence") ? "add " : "remove ") + id
        }
    }

    @Test func anAppsRegionsAreKeptAndArmedAsItsGeofencesWhenTheSettingSaysSo() throws {
        let gateway = try host(settings: ["ownTracksGeofences": .bool(true), "maxRegionsPerDevice": .number(3)])
        let base = "owntracks/jane/phone"
        gateway.receive(MQTTMessage(topic: base + "/waypoint", string: waypoint("Home", rid: "h1")))
        #expect(gateway.commit())
        #expect(try fenceCommands() == ["add ot-h1"])
        let add = try #require(bus.messages.first { $0.topic == "tracker/jane.phone/cmd/addGeofence" })
        let request = try JSONDecoder().decode(CommandRequest.self, from: Data(add.payload))
        let fence = try JSONDecoder().decode(Geofence.self, from: JSONCoding.encode(try #require(request.args)))
        #expect(fence == Geofence(id: "ot-h1", latitude: 48.137, longitude: 11.575, radiusM: 100))
        // A rename keeps the fence (re-arming would restart a visit); a move re-arms it.
        bus.clear()
        gateway.receive(MQTTMessage(topic: base + "/waypoint", string: waypoint("Home sweet home", rid: "h1")))
        gateway.receive(MQTTMessage(topic: base + "/waypoint", string: waypoint("Home sweet home", rid: "h1", rad: 150)))
        #expect(gateway.commit())
        #expect(try fenceCommands() == ["add ot-h1"])
        #expect(diagnostics("ownTracksRegions").first?.hasPrefix("the app's region, stored as geofences (no change)") == true)
        // The app's whole list replaces what was kept: Home goes, Gym is armed, a beacon region is kept unarmed.
        bus.clear()
        gateway.receive(MQTTMessage(topic: base + "/waypoints", string: #"{"_type":"waypoints","waypoints":[\#(waypoint("Gym", rid: "g1")),\#(waypoint("Beacon", rid: "b1", lat: nil))]}"#))
        #expect(gateway.commit())
        #expect(try fenceCommands() == ["add ot-g1", "remove ot-h1"])
        let store = try GatewayStore(db: try Database(path: database.path, readOnly: true))
        #expect(try GatewayStore.regions(store.db, of: DeviceID("jane.phone")!).map(\.region.name) == ["Beacon", "Gym"])
        // Past maxRegionsPerDevice: refused whole, loudly, and nothing changes.
        bus.clear()
        let four = (1...4).map { waypoint("R\($0)", rid: "r\($0)") }.joined(separator: ",")
        gateway.receive(MQTTMessage(topic: base + "/waypoints", string: #"{"_type":"waypoints","waypoints":[\#(four)]}"#))
        #expect(gateway.commit())
        #expect(errors("limitReached").map(\.1) == ["maxRegionsPerDevice: the app's regions would be 4, the limit is 3; none of this message was kept"])
        #expect(try fenceCommands().isEmpty)
        #expect(try GatewayStore.regions(store.db, of: DeviceID("jane.phone")!).map(\.region.name) == ["Beacon", "Gym"])
    }

    @Test func reportLocationAsksTheAppOnItsOwnCommandTopic() throws {
        let gateway = try host()
        let t = Double(clock.nowMs()) / 1000
        gateway.receive(MQTTMessage(topic: "owntracks/jane@example.com/Jane's iPhone", string: ownTracksLocation(t)))
        gateway.receive(fix(t))
        #expect(gateway.commit())
        bus.clear()
        let device = "jane_40example_2ecom_2fJane_27s_20iPhone"
        gateway.receive(MQTTMessage(topic: "tracker/\(device)/cmd/reportLocation", payload: [], responseTopic: "tracker/\(device)/reply/r"))
        gateway.receive(MQTTMessage(topic: "tracker/van1/cmd/reportLocation", payload: [], responseTopic: "tracker/van1/reply/r"))
        #expect(gateway.commit())
        let sent = bus.messages.filter { $0.topic.hasPrefix("owntracks/") }
        #expect(sent.map(\.topic) == ["owntracks/jane@example.com/Jane's iPhone/cmd"])
        #expect(sent.first?.string == #"{"_type":"cmd","action":"reportLocation"}"# && sent.first?.retain == false)
        #expect(try reply(on: "tracker/\(device)/reply/r")?.ok == true)
        // A device that never spoke OwnTracks has no app to ask.
        let refused = try #require(try reply(on: "tracker/van1/reply/r"))
        #expect(refused.ok == false && refused.code == "notFound", "\(refused)")
        // The command comes back on the gateway's own subscription: counted, not taken for the app's data.
        gateway.receive(MQTTMessage(topic: sent[0].topic, payload: sent[0].payload))
        #expect(gateway.commit())
        #expect(counters.snapshot().extra["appCommands"] == 1 && diagnostics("ignored").isEmpty)
    }

    @Test func trackersOwnFriendTopicsAreNoDevice() throws {
        let gateway = try host()
        let t = Double(clock.nowMs()) / 1000
        gateway.receive(MQTTMessage(topic: "owntracks/_tracker/jane.phone", string: ownTracksLocation(t)))
        gateway.receive(MQTTMessage(topic: "owntracks/_tracker/jane.phone/info", string: #"{"_type":"card","name":"x","tid":"JP"}"#))
        #expect(gateway.commit())
        #expect(bus.messages.isEmpty)
    }
}

/// The partitioned gateway's ingress gate: an account's OwnTracks devices across partitions.
@Suite struct AccountGateTests {
    @Test func anAccountsNewDevicesPastTheLimitAreRefusedOnceAndTrackersOwnFriendsAreNoAccount() throws {
        let database = TemporaryDatabase("gate")
        let gate = try AccountGate(IngressGateContext(db: try Database(path: database.path), topics: Topics(),
                                                      logger: Logger(label: "test", minimum: .off)), max: 2)
        func location(_ topic: String) -> MQTTMessage { MQTTMessage(topic: topic, string: #"{"_type":"location","lat":1,"lon":2,"tst":3}"#) }
        #expect(gate.check(location("owntracks/jane/a")) == nil)
        #expect(gate.check(location("owntracks/jane/b/event")) == nil)
        #expect(gate.check(location("owntracks/jane/a")) == nil)  // known: no slot taken twice
        let refused = gate.check(location("owntracks/jane/c"))
        #expect(refused?.refusal.code == .limitReached && refused?.refusal.announce == true)
        #expect(gate.check(location("owntracks/jane/c"))?.refusal.announce == false)
        // Not a device of the account: a command to the app, a cleared retained message, Tracker's own friend cards.
        #expect(gate.check(location("owntracks/jane/d/cmd")) == nil)
        #expect(gate.check(MQTTMessage(topic: "owntracks/jane/e", string: "")) == nil)
        for n in 0..<5 { #expect(gate.check(location("owntracks/_tracker/van\(n)")) == nil) }
        // … and took no slot: d and e are new devices past the limit when they speak.
        #expect(gate.check(location("owntracks/jane/d"))?.refusal.code == .limitReached)
        #expect(gate.check(location("owntracks/jane/e"))?.refusal.code == .limitReached)
        #expect(gate.check(location("owntracks/bob/a")) == nil)
    }
}
