import Bus
import Foundation
import TrackerLog
import Model
@testable import Motion
import MotionCore
@testable import Runtime
import Store
import TestSupport
import Testing

/// The motion service's definition on the host, in process, on a manual clock.
@Suite struct MotionHostTests {
    let bus = RecordingBus()
    let clock = ManualClock()
    let counters = HealthCounters()
    let database = TemporaryDatabase("motion")
    let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
    let t0: Int64 = 1_790_000_000_000

    func host(_ settings: [String: JSONValue] = [:]) throws -> ServiceHost<MotionDeviceRow> {
        try .inProcess(MotionService.definition(try MotionSettings(.test(settings))), path: database.path, bus: bus, clock: clock,
                       counters: counters)
    }

    func point(_ seq: Int64, t: Double, x: Double, y: Double = 0, speed: Double? = nil, session: String = "s1") -> MQTTMessage {
        let (lat, lon) = frame.toGeo(x: x, y: y)
        let p = TrackPoint(seq: seq, sessionID: session, timeMs: t0 + Int64(t * 1000), latitude: lat, longitude: lon,
                           accuracyM: 5, speedMps: speed, odometerM: x)
        return MQTTMessage(topic: "tracker/van1/points", payload: JSONCoding.bytes(PointMessage(device: DeviceID("van1")!, point: p, epoch: "f1")))
    }

    func command(_ name: String, _ args: String = "{}", device: String = "van1") -> MQTTMessage {
        MQTTMessage(topic: "tracker/\(device)/cmd/\(name)", string: #"{"id":"r","args":\#(args)}"#)
    }

    func reply(_ name: String, device: String = "van1") throws -> CommandReply? {
        try bus.messages.last { $0.topic == "tracker/\(device)/reply/\(name)" }.map { try JSONDecoder().decode(CommandReply.self, from: Data($0.payload)) }
    }

    func events(_ device: String = "van1") -> [Event] {
        bus.events(topicSuffix: "tracker/\(device)/events")
    }

    func crossings() -> [Crossing] { events().compactMap { if case .geofence(let c) = $0.body { c } else { nil } } }

    func addFence(_ host: ServiceHost<MotionDeviceRow>, _ id: String, x: Double, y: Double = 0, radius: Double, dwellMs: Int? = nil,
                  device: String = "van1") {
        let (lat, lon) = frame.toGeo(x: x, y: y)
        let dwell = dwellMs.map { #","dwellAfterMs":\#($0)"# } ?? ""
        host.receive(command("addGeofence", #"{"id":"\#(id)","latitude":\#(lat),"longitude":\#(lon),"radiusM":\#(radius)\#(dwell)}"#, device: device))
    }

    /// Drives east at 10 m/s through `depot` (150 m around x = 500), then —
    /// fixes a minute apart — past `bridge` (100 m around x = 1300, 20 m off
    /// the line) without a fix inside it, and stops at x = 2000.
    func drive(_ motion: ServiceHost<MotionDeviceRow>) {
        var seq: Int64 = 0
        for t in 0...100 { seq += 1; motion.receive(point(seq, t: Double(t), x: Double(t) * 10, speed: 10)) }
        for t in stride(from: 160, through: 200, by: 1) { seq += 1; motion.receive(point(seq, t: Double(t), x: 1_600 + Double(t - 160) * 10, speed: 10)) }
        for t in stride(from: 205, through: 700, by: 5) { seq += 1; motion.receive(point(seq, t: Double(t), x: 2_000, speed: 0)) }
    }

    @Test func aDeviceWhoseRowCannotBeReadNumbersItsMotionOnAndKeepsItsRoute() throws {
        func states() -> [MotionMessage] { bus.decoded(MotionMessage.self, topicSuffix: "van1/motion") }
        do {
            let motion = try host()
            let (lat, lon) = frame.toGeo(x: 5_000, y: 0)
            motion.receive(command("setActiveRoute", #"{"points":[{"latitude":48.1,"longitude":11.5},{"latitude":\#(lat),"longitude":\#(lon)}]}"#))
            drive(motion)  // moving, then stopped: two states
            #expect(motion.commit())
            motion.close()
        }
        let sent = states().map(\.seq)
        #expect(sent.count >= 2)
        try Database(path: database.path).run("UPDATE host_devices SET row = x'F1630000' WHERE device = 'van1'")
        bus.clear()

        let motion = try host()
        defer { motion.close() }
        for t in 0...10 { motion.receive(point(Int64(500 + t), t: 800 + Double(t), x: 2_000 + Double(t) * 10, speed: 10)) }
        #expect(motion.commit())
        #expect(states().map(\.seq).first == sent.last! + 1, "a consumer takes it: numbered after the last state sent")
        #expect(events().contains { $0.diagnosticCode == "stateSetAside" })
        let stored = try #require(try Database(path: database.path, readOnly: true)
            .first("SELECT row FROM host_devices WHERE device = 'van1'") { $0.data(0) })
        let row = try MotionDeviceRow.restored(from: stored, using: JSONCoding.decoder)
        #expect(row.route != nil, "the route stays armed")
        #expect(row.motionSeq == states().last?.seq)
    }

    @Test func aDriveThroughFencesReportsEveryVisitOnceWithItsTime() throws {
        let motion = try host()
        addFence(motion, "depot", x: 500, radius: 150, dwellMs: 20_000)
        addFence(motion, "bridge", x: 1_300, y: 20, radius: 100)
        drive(motion)
        #expect(motion.commit())
        let seen = crossings().map { "\($0.geofenceID) \($0.kind.rawValue)" }
        #expect(seen == ["depot enter", "depot dwell", "depot exit", "bridge enter", "bridge exit"])
        let byName = Dictionary(crossings().map { ("\($0.geofenceID) \($0.kind.rawValue)", $0) }, uniquingKeysWith: { a, _ in a })
        func seconds(_ key: String) -> Double { Double(byName[key]!.timeMs - t0) / 1000 }
        // True crossings: depot at x = 350 and 650 (35 s, 65 s).
        #expect(abs(seconds("depot enter") - 35) < 5 && abs(seconds("depot exit") - 65) < 5)
        // The dwell is entry + dwellAfterMs exactly.
        #expect(byName["depot dwell"]!.timeMs == byName["depot enter"]!.timeMs + 20_000)
        // Bridge: between the fixes at 100 s (x = 1,000) and 160 s (x = 1,600), none inside; the line
        // crosses the circle at x = 1,300 ∓ 98 m: 119.8 s and 139.8 s, marked interpolated.
        #expect(abs(seconds("bridge enter") - 119.8) < 0.5 && abs(seconds("bridge exit") - 139.8) < 0.5)
        #expect(byName["bridge enter"]!.interpolated == true && byName["depot enter"]!.interpolated == nil)
        // The stop settles (5 min after arrival at 200 s) and a trip ended with it.
        let motionStates = events().compactMap { if case .motionChange(let s, _) = $0.body { s } else { nil } }
        #expect(motionStates.last == .stationary)
        #expect(events().contains { if case .tripEnded(let trip) = $0.body { trip.distanceM > 1_900 } else { false } })
        // Motion states go to the filter on tracker/van1/motion, numbered from 1.
        let sent = bus.decoded(MotionMessage.self, topicSuffix: "/motion")
        #expect(sent.map(\.seq) == Array(1...Int64(sent.count)) && sent.map(\.state) == motionStates)
    }

    @Test func aFenceArmedAroundTheDeviceEntersAtOnceAndReArmingRestartsItsDwell() throws {
        let motion = try host()
        drive(motion)
        addFence(motion, "yard", x: 2_000, radius: 100, dwellMs: 60_000)
        #expect(motion.commit())
        #expect(crossings().map(\.kind) == [.enter])
        let added = events().filter { if case .geofenceAdded = $0.body { true } else { false } }
        #expect(added.count == 1)
        // Re-adding the id replaces it: a new geofenceAdded, a new entry, the dwell from now.
        clock.advance(by: .seconds(30))
        addFence(motion, "yard", x: 2_000, radius: 100, dwellMs: 60_000)
        #expect(motion.commit())
        #expect(crossings().map(\.kind) == [.enter, .enter])
        let entry = crossings()[1].timeMs
        // The device says nothing more; the clock fires the dwell, at entry + 60 s exactly.
        clock.advance(by: .seconds(59)); motion.tick(); #expect(motion.commit())
        #expect(crossings().map(\.kind) == [.enter, .enter])
        clock.advance(by: .seconds(2)); motion.tick(); #expect(motion.commit())
        #expect(crossings().map(\.kind) == [.enter, .enter, .dwell])
        #expect(crossings()[2].timeMs == entry + 60_000)
    }

    @Test func aRestartBetweenEntryAndDwellStillDwellsAtEntryPlusDelay() throws {
        var motion: ServiceHost<MotionDeviceRow>? = try host()
        addFence(motion!, "depot", x: 500, radius: 150, dwellMs: 600_000)
        for t in 0...40 { motion!.receive(point(Int64(t + 1), t: Double(t), x: Double(t) * 10, speed: 10)) }
        #expect(motion!.commit())
        let entry = try #require(crossings().first { $0.kind == .enter })
        motion = nil
        // A new process on the same store, twenty minutes later: the dwell is noticed late, stamped on time.
        let restarted = try host()
        clock.advance(by: .seconds(1_200))
        restarted.tick(); #expect(restarted.commit())
        let dwell = try #require(crossings().first { $0.kind == .dwell })
        #expect(dwell.timeMs == entry.timeMs + 600_000)
        #expect(crossings().filter { $0.kind == .dwell }.count == 1)
    }

    @Test func badFencesAreRefusedByNameAndTheCapIsNamed() throws {
        let motion = try host(["maxGeofencesPerDevice": .number(2)])
        for (args, words) in [
            (#"{"id":"a","latitude":48,"longitude":11,"radiusM":0}"#, "radiusM"),
            (#"{"id":"a","latitude":91,"longitude":11,"radiusM":100}"#, "latitude"),
            (#"{"id":"a","latitude":48,"longitude":-181,"radiusM":100}"#, "longitude"),
            (#"{"id":"","latitude":48,"longitude":11,"radiusM":100}"#, "id"),
            (#"{"id":"\#(String(repeating: "x", count: 65))","latitude":48,"longitude":11,"radiusM":100}"#, "id"),
            (#"{"latitude":48,"longitude":11,"radiusM":100}"#, "id"),
        ] {
            motion.receive(command("addGeofence", args))
            #expect(motion.commit())
            let answer = try #require(try reply("addGeofence"))
            #expect(answer.code == "badInput" && answer.message?.contains(words) == true, "\(args): \(String(describing: answer.message))")
        }
        addFence(motion, "a", x: 0, radius: 50)
        addFence(motion, "b", x: 0, radius: 200)
        addFence(motion, "a", x: 10, radius: 200)  // a replacement is not a third fence
        #expect(motion.commit())
        #expect(try reply("addGeofence")?.ok == true)
        addFence(motion, "c", x: 0, radius: 200)
        #expect(motion.commit())
        #expect(try reply("addGeofence").map { $0.code == "limitReached" && $0.message?.contains("maxGeofencesPerDevice = 2") == true } == true)
        // The 50 m fence was armed, with a diagnostic naming the setting.
        #expect(events().contains { if case .diagnostic("smallGeofence", let m) = $0.body { m.contains("minReliableRadiusM") } else { false } })
        // Unknown id: false, no event. All: one geofenceRemoved per fence.
        motion.receive(command("removeGeofence", #"{"id":"zzz"}"#)); #expect(motion.commit())
        #expect(try reply("removeGeofence")?.result == .bool(false))
        motion.receive(command("removeAllGeofences")); #expect(motion.commit())
        #expect(try reply("removeAllGeofences")?.result == .number(2))
        #expect(events().filter { if case .geofenceRemoved = $0.body { true } else { false } }.count == 2)
    }

    @Test func historyIsNewestFirstAndOutlivesItsFence() throws {
        let motion = try host()
        addFence(motion, "depot", x: 500, radius: 150)
        drive(motion)
        motion.receive(command("removeGeofence", #"{"id":"depot"}"#))
        #expect(motion.commit())
        motion.receive(command("getGeofenceEvents", #"{"geofenceID":"depot"}"#))
        #expect(motion.commit())
        let message = try #require(bus.waitForMessage { $0.topic == "tracker/van1/reply/getGeofenceEvents" })
        let history = try JSONDecoder().decode(CommandReply.self, from: Data(message.payload))
        guard case .array(let items)? = history.result else { Issue.record("no list: \(history)"); return }
        let kinds = items.compactMap { $0["kind"]?.stringValue }
        #expect(kinds == ["exit", "enter"])
    }

    @Test func changePaceNeedsASessionAndIsIdempotent() throws {
        let motion = try host()
        motion.receive(command("changePace", #"{"isMoving":true}"#)); #expect(motion.commit())
        #expect(try reply("changePace")?.code == "notReady")
        motion.receive(point(1, t: 0, x: 0))
        motion.receive(command("changePace", #"{"isMoving":true}"#)); #expect(motion.commit())
        #expect(try reply("changePace")?.result == .object(["state": .string("moving")]))
        let before = events().count
        motion.receive(command("changePace", #"{"isMoving":true}"#)); #expect(motion.commit())
        #expect(events().count == before)
        // The gateway closes the session: no more pace changes.
        let stopped = Event(device: DeviceID("van1")!, timeMs: t0, .sessionStopped(Session(id: "s1", device: DeviceID("van1")!, tag: nil, startMs: t0, endMs: t0 + 1)))
        motion.receive(MQTTMessage(topic: "tracker/van1/events", payload: JSONCoding.bytes(stopped)))
        motion.receive(command("changePace", #"{"isMoving":false}"#)); #expect(motion.commit())
        #expect(try reply("changePace")?.code == "notReady")
    }

    @Test func stopOnStationaryAsksTheGatewayToStopAndHeartbeatsFollowTheClock() throws {
        let motion = try host(["stopOnStationary": .bool(true), "heartbeatIntervalMin": .number(15)])
        drive(motion)
        #expect(motion.commit())
        #expect(bus.messages.contains { $0.topic == "tracker/van1/cmd/stop" })
        let heartbeats = { self.events().filter { if case .heartbeat = $0.body { true } else { false } } }
        #expect(heartbeats().isEmpty)
        // Settled about 500 s in (device time), last fix at 700 s: the first heartbeat is due 15 min
        // after settling, some 700 s of silence later on the clock, and stamped exactly then.
        let settled = try #require(events().last { if case .motionChange(.stationary, _) = $0.body { true } else { false } }).timeMs
        clock.advance(by: .seconds(680)); motion.tick(); #expect(motion.commit())
        #expect(heartbeats().isEmpty)
        clock.advance(by: .seconds(30)); motion.tick(); #expect(motion.commit())
        #expect(heartbeats().map(\.timeMs) == [settled + 900_000])
        // Two hours of silence: one heartbeat per interval, not a burst.
        for _ in 0..<8 { clock.advance(by: .seconds(15 * 60)); motion.tick(); #expect(motion.commit()) }
        #expect(heartbeats().count == 9)
    }

    @Test func badActivityReadingsAreRefusedAndChangesAreAnnounced() throws {
        let motion = try host()
        motion.receive(MQTTMessage(topic: "tracker/van1/activity", string: #"{"activity":"flying","confidence":100}"#))
        motion.receive(MQTTMessage(topic: "tracker/van1/activity", string: #"{"activity":"walking","confidence":300}"#))
        motion.receive(MQTTMessage(topic: "tracker/van1/activity", string: #"{"confidence":100}"#))
        motion.receive(MQTTMessage(topic: "tracker/van1/activity", string: #"{"activity":"walking","confidence":100}"#))
        motion.receive(MQTTMessage(topic: "tracker/van1/activity", string: #"{"activity":"walking","confidence":66}"#))
        motion.receive(MQTTMessage(topic: "tracker/van1/activity", string: #"{"activity":"in_vehicle","confidence":33}"#))
        #expect(motion.commit())
        let errors = events().compactMap { if case .error(let code, _) = $0.body { code } else { nil } }
        #expect(errors == ["badInput", "badInput", "badInput"])
        let changes = events().compactMap { if case .activityChange(let a, _) = $0.body { a } else { nil } }
        #expect(changes == ["walking"])
    }

    @Test func aWrongTurnGoesOffRouteButOneSpikeDoesNot() throws {
        let motion = try host()
        let (lat0, lon0) = frame.toGeo(x: 0, y: 0), (lat1, lon1) = frame.toGeo(x: 3_000, y: 0)
        motion.receive(command("setActiveRoute", #"{"points":[{"latitude":\#(lat0),"longitude":\#(lon0)},{"latitude":\#(lat1),"longitude":\#(lon1)}]}"#))
        var seq: Int64 = 0
        for t in 0..<30 { seq += 1; motion.receive(point(seq, t: Double(t), x: Double(t) * 10, y: t == 10 ? 300 : 0, speed: 10)) }
        #expect(motion.commit())
        #expect(!events().contains { if case .offRoute = $0.body { true } else { false } })
        for t in 30..<40 { seq += 1; motion.receive(point(seq, t: Double(t), x: 290, y: Double(t - 29) * 30, speed: 10)) }
        motion.receive(command("isOffRoute")); #expect(motion.commit())
        #expect(try reply("isOffRoute")?.result == .bool(true))
        #expect(events().filter { if case .offRoute = $0.body { true } else { false } }.count == 1)
        for t in 40..<45 { seq += 1; motion.receive(point(seq, t: Double(t), x: 300 + Double(t - 40) * 10, speed: 10)) }
        #expect(motion.commit())
        #expect(events().filter { if case .onRoute = $0.body { true } else { false } }.count == 1)
    }

    @Test func theStillBarBelowTheGeneralOneStopsTheServiceNamingBoth() {
        #expect(throws: ConfigError.self) { try MotionSettings(SettingsReader(values: ["stillConfidenceMin": .number(50)], source: "test")) }
        let old = try? MotionSettings(SettingsReader(values: ["stopTimeoutSec": .number(90)], source: "test"))
        #expect(old?.rules.stopTimeoutMs == 120_000)
    }
}

extension MotionHostTests {
    /// History is kept for `historyRetentionDays` of the device's own time, then trimmed.
    @Test func historyOlderThanItsRetentionIsTrimmed() throws {
        let motion = try host(["historyRetentionDays": .number(1)])
        addFence(motion, "depot", x: 500, radius: 150)
        drive(motion)
        #expect(motion.commit())
        #expect(crossings().count == 2)
        // Two days later the device drives on; its 512th point trims what is older than a day.
        for seq in Int64(300)...512 { motion.receive(point(seq, t: 2 * 86_400 + Double(seq), x: 5_000 + Double(seq) * 10, speed: 10)) }
        #expect(motion.commit())
        motion.receive(command("getGeofenceEvents"))
        #expect(motion.commit())
        let message = try #require(bus.waitForMessage { $0.topic == "tracker/van1/reply/getGeofenceEvents" })
        let history = try JSONDecoder().decode(CommandReply.self, from: Data(message.payload))
        #expect(history.result?.arrayValue?.isEmpty == true, "\(String(describing: history.result))")
    }
}
