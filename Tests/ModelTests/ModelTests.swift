import Foundation
import Model
import Testing

@Suite struct DeviceIDTests {
    @Test func acceptsTheContractAlphabet() {
        #expect(DeviceID("phone-1.A_b") != nil)
        #expect(DeviceID(String(repeating: "a", count: 64)) != nil)
    }

    @Test(arguments: ["", "_fleet", "a/b", "a+b", "a#", "ä", "a b", String(repeating: "a", count: 65)])
    func refusesEverythingElse(_ raw: String) {
        #expect(DeviceID(raw) == nil)
    }

    @Test func reservedIdsOnlyWhereAllowed() {
        #expect(DeviceID(allowingReserved: "_fleet") == DeviceID.fleet)
        #expect(DeviceID.fleet.isReserved)
    }
}

@Suite struct OwnTracksIDTests {
    func id(_ user: String, _ device: String) -> String { DeviceID.ownTracks(user: user, device: device).rawValue }

    @Test func namesThatMadeAValidIdKeepIt() {
        #expect(id("alice", "phone") == "alice.phone")
        #expect(id("john.doe", "my_phone-2") == "john.doe.my_phone-2")
        #expect(id(String(repeating: "u", count: 31), String(repeating: "d", count: 32)).count == 64)
    }

    @Test func everyOtherNameIsEscaped() {
        #expect(id("jane@example.com", "Jane's iPhone") == "jane_40example_2ecom_2fJane_27s_20iPhone")
        #expect(id("bad user", "phone") == "bad_20user_2fphone")
        #expect(id("_x", "phone") == "-_5fx_2fphone")          // never a reserved id
        #expect(id("-x", "ph one") == "-_2dx_2fph_20one")        // a leading '-' is escaped: the marker stays unambiguous
        #expect(id("", "phone") == "-_2fphone")
        #expect(id("jürgen", "a") == "j_c3_bcrgen_2fa")
        #expect(!id("a b", "c.d").contains("."))                // never a plain id
    }

    @Test func aLongOneIsCutAndHashed() {
        let long = id(String(repeating: "ü", count: 40), "phone")
        #expect(long.utf8.count <= 64 && DeviceID(long) != nil)
        #expect(long.contains("__") && long.hasPrefix("u_c3_bc") == false && long.hasPrefix("_c3") == false)
        #expect(long.split(separator: "_", omittingEmptySubsequences: false).last?.count == 16)
        // Names too long together for a plain id are hashed, not truncated into another's id.
        let a = id(String(repeating: "a", count: 40), String(repeating: "b", count: 40))
        let b = id(String(repeating: "a", count: 40), String(repeating: "b", count: 41))
        #expect(a != b && a.utf8.count == 64 && b.utf8.count == 64)
        #expect(DeviceID(a)!.ownTracksNames == nil)
    }

    @Test func itIsStableAndReversible() {
        let names = [("jane@example.com", "Jane's iPhone"), ("alice", "phone"), ("_x", "y"), ("-", "-"), ("", "x"), ("x", ""),
                     ("a_2fb", "c"), ("a", "b.c"), ("é", "☃"), ("a/", "b"), ("%", "_20")]
        var seen: [String: (String, String)] = [:]
        for (user, device) in names {
            let made = DeviceID.ownTracks(user: user, device: device)
            #expect(DeviceID(made.rawValue) == made, "\(made) is not a valid ordinary id")
            #expect(made == DeviceID.ownTracks(user: user, device: device))
            if user.contains("/") { continue }  // not a topic level
            let back = made.ownTracksNames
            #expect(back?.user == user && back?.device == device, "\(user)/\(device) → \(made) → \(String(describing: back))")
            #expect(seen[made.rawValue] == nil, "\(user)/\(device) and \(String(describing: seen[made.rawValue])) share \(made)")
            seen[made.rawValue] = (user, device)
        }
        // Ids the mapping never makes read as no names.
        for raw in ["van1", "a_2fb", "a_zz_2fb", "abc.", "-abc"] { #expect(DeviceID(raw)!.ownTracksNames == nil, "\(raw)") }
    }

    /// Injective but for the plain ids of earlier versions, kept as they were:
    /// `a.b`/`c` and `a`/`b.c` were both `a.b.c` and still are (the gateway
    /// refuses the second one it meets, `conflict`).
    @Test func noTwoNamePairsShareAnIdButThePlainOnesOfUsersWithADot() {
        #expect(id("a.b", "c") == id("a", "b.c"))
        // Every pair over a small alphabet that holds each kind of byte: plain, escaped, the marker, hex digits.
        let alphabet = ["a", ".", "_", "-", " ", "2", "f"]
        var words: Set<String> = [""]
        for _ in 0..<3 { words.formUnion(words.flatMap { w in alphabet.map { w + $0 } }) }
        var seen: [DeviceID: (String, String)] = [:]
        var collisions = 0
        for user in words { for device in words {
            let made = DeviceID.ownTracks(user: user, device: device)
            if let (u, d) = seen[made] {
                let bothPlain = made.rawValue == "\(u).\(d)" && made.rawValue == "\(user).\(device)"
                #expect(bothPlain && (u.contains(".") || user.contains(".")), "\(user)/\(device) and \(u)/\(d) share \(made)")
                collisions += 1
                if collisions > 1_000_000 { return }
            }
            seen[made] = (user, device)
        } }
        #expect(seen.count > 100_000)
    }
}

@Suite struct TopicTests {
    let topics = Topics()

    @Test func parsesEveryKind() {
        let d = DeviceID("p1")!
        #expect(topics.parse("tracker/p1/fixes") == .fixes(d))
        #expect(topics.parse("tracker/p1/raw") == .raw(d))
        #expect(topics.parse("tracker/_fleet/cmd/syncNow") == .command(.fleet, name: "syncNow"))
        #expect(topics.parse("owntracks/alice/phone") == .ownTracks(DeviceID("alice.phone")!))
        #expect(topics.parse("tracker/bad id/fixes") == .invalidDevice("bad id"))
        #expect(topics.parse("owntracks/jane@example.com/Jane's iPhone") == .ownTracks(DeviceID("jane_40example_2ecom_2fJane_27s_20iPhone")!))
        #expect(topics.parse("owntracks/a b/c/event") == .ownTracksSubtopic(DeviceID("a_20b_2fc")!, "event"))
        #expect(topics.ownTracksNames("owntracks/jane@example.com/Jane's iPhone/event")! == ("jane@example.com", "Jane's iPhone"))
        #expect(topics.parse("tracker/_health/gateway") == .other)
        #expect(topics.parse("elsewhere/p1/fixes") == .other)
        #expect(topics.parse("tracker/p1/cmd/getTrips") == .command(d, name: "getTrips"))
        #expect(topics.parse("tracker/p1/events") == .events(d))
        #expect(topics.parse("tracker/_fleet/events") == .other)
        #expect(topics.parse("tracker/_x/fixes") == .invalidDevice("_x"))
        for odd in ["tracker/p1/fixes/x/y", "tracker/p1", "tracker", "", "tracker//fixes", "/p1/fixes", "tracker/p1/cmd"] {
            #expect([.other, .invalidDevice("")].contains(topics.parse(odd)), "\(odd)")
        }
    }

    @Test func honoursThePrefix() {
        let custom = Topics(prefix: "fleet42")
        #expect(custom.raw(DeviceID("x")!) == "fleet42/x/raw")
        #expect(custom.parse("fleet42/x/fixes") == .fixes(DeviceID("x")!))
        #expect(custom.parse("tracker/x/fixes") == .other)
    }
}

@Suite struct EventCodingTests {
    @Test func errorEventIsFlat() throws {
        let event = Event(device: DeviceID("p1")!, timeMs: 5, .error(code: "badInput", message: "lat: missing"))
        let object = try JSONSerialization.jsonObject(with: JSONCoding.encode(event)) as? [String: Any]
        #expect(object?["type"] as? String == "error")
        #expect(object?["device"] as? String == "p1")
        #expect(object?["timeMs"] as? Int == 5)
        #expect(object?["code"] as? String == "badInput")
        #expect(object?["message"] as? String == "lat: missing")
    }

    @Test func roundTripsEveryModelledType() throws {
        let d = DeviceID("p1")!
        let point = TrackPoint(seq: 3, sessionID: "s", timeMs: 9, latitude: 1, longitude: 2, accuracyM: 5, odometerM: 7)
        let bodies: [Event.Body] = [
            .location(point),
            .locationRejected(Decision(seq: 4, timeMs: 9, accepted: false, reason: "accuracy_too_low", estimate: nil)),
            .sessionStarted(Session(id: "s", device: d, tag: "t", startMs: 1)),
            .trackingGap(durationSec: 600, distanceMeters: 300),
            .diagnostic(code: "x", message: "y"),
            .regionTransition(RegionTransition(region: "Home", event: .leave, timeMs: 9, latitude: 1, longitude: 2, accuracyM: 3, regionID: "r", trigger: "c")),
        ]
        for body in bodies {
            let event = Event(device: d, timeMs: 1, body)
            #expect(try JSONCoding.decoder.decode(Event.self, from: JSONCoding.encode(event)) == event)
        }
    }

    @Test func aRegionTransitionReadsBackAndIsNothingElse() throws {
        let transition = RegionTransition(region: "Home", event: .enter, timeMs: 1_793_197_938_000, latitude: 48.1, longitude: 11.5, accuracyM: 12)
        let event = Event(device: DeviceID("p1")!, timeMs: 1, .regionTransition(transition))
        #expect(event.type == "regionTransition")
        let decoded = try JSONCoding.decoder.decode(Event.self, from: JSONCoding.encode(event))
        #expect(decoded.body.asRegionTransition == transition)
        #expect(Event.Body.diagnostic(code: "regionTransition", message: "m").asRegionTransition == nil)
        #expect(Event.Body.other(type: "regionTransition", fields: [:]).asRegionTransition == nil)
    }

    @Test func unknownTypesSurviveDecoding() throws {
        let json = #"{"type":"parcelDelivered","device":"p1","timeMs":3,"crossing":{"geofenceID":"home"}}"#
        let event = try JSONCoding.decoder.decode(Event.self, from: Data(json.utf8))
        #expect(event.type == "parcelDelivered")
        guard case .other(_, let fields) = event.body else { Issue.record("expected .other"); return }
        #expect(fields["crossing"]?["geofenceID"]?.stringValue == "home")
    }
}

@Suite struct GeodesyTests {
    @Test func oneDegreeOfLatitude() {
        let d = Geodesy.distance(0, 0, 1, 0)
        #expect(abs(d - 111_195) < 10)
    }

    @Test func localFrameRoundTrips() {
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        let (x, y) = frame.toLocal(lat: 48.105, lon: 11.51)
        let back = frame.toGeo(x: x, y: y)
        #expect(abs(back.lat - 48.105) < 1e-9 && abs(back.lon - 11.51) < 1e-9)
        #expect(abs(hypot(x, y) - Geodesy.distance(48.1, 11.5, 48.105, 11.51)) < 0.5)
    }
}

@Suite struct CommandModelTests {
    @Test func pagingIsChecked() throws {
        #expect(try PageArgs().validated() == (1_000, 0))
        #expect(throws: CommandError.self) { try PageArgs(limit: 0).validated() }
        #expect(throws: CommandError.self) { try PageArgs(limit: 10, offset: -1).validated() }
    }

    @Test func replyShapesMatchTheContract() throws {
        let failure = CommandReply.failure(id: .string("7"), CommandError(.notReady, "no"))
        let object = try JSONSerialization.jsonObject(with: JSONCoding.encode(failure)) as? [String: Any]
        #expect(object?["ok"] as? Bool == false)
        #expect(object?["code"] as? String == "notReady")
        #expect(object?["id"] as? String == "7")
    }
}
