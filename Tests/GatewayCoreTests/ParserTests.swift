import Foundation
import GatewayCore
import Model
import Testing

/// 2026-11-01 in ms: "now" for these tests; fixtures are older, which is fine
/// because the staleness ceiling is off by default.
let now: Int64 = 1_793_500_000_000

@Suite struct DevicePayloadTests {
    let parser = FixParser(validator: FixValidator())

    func parse(_ text: String) -> ParsedPayload { parser.parseDevicePayload(Array(text.utf8), nowMs: now) }

    func problems(_ text: String) -> [String] {
        switch parse(text) {
        case .refused(let p): return [p.message]
        case .fixes(let results): return results.compactMap { if case .failure(let p) = $0 { p.message } else { nil } }
        case .ignored: return []
        }
    }

    @Test func aFixFromTheContractPasses() throws {
        guard case .fixes(let results) = parse(#"{"t":1793197938.549,"lat":37.331821,"lon":-122.030386,"acc":10,"speed":1.54,"course":-1.0}"#),
              case .success(let fix)? = results.first else { Issue.record("not accepted"); return }
        #expect(fix.timeMs == 1_793_197_938_549)
        #expect(fix.speedMps == 1.54)
        #expect(fix.courseDeg == nil)  // -1 means unknown
    }

    @Test func everyFixtureLineIsAccepted() throws {
        for name in ["city-run.jsonl", "munich-drive.jsonl", "posmo-train.jsonl", "pixel6-walk.jsonl", "mtv-drive-truth.jsonl"] {
            let lines = try String(contentsOf: TestFixtures.url(name), encoding: .utf8).split(separator: "\n")
            for line in lines {
                #expect(problems(String(line)).isEmpty, "\(name): \(line)")
            }
        }
    }

    @Test(arguments: [
        ("not json", "payload is not valid JSON"),
        ("", "payload is empty"),
        ("   ", "payload is empty"),
        ("42", "payload: expected a fix object or an array of fixes"),
        ("[]", "payload: empty array, no fix in it"),
        (#"{"t":1793197938,"lat":"north","lon":2,"acc":5}"#, "lat: expected a number"),
        (#"{"t":1793197938,"lon":2,"acc":5}"#, "lat: required field is missing"),
        (#"{"t":1793197938,"lat":1,"lon":2}"#, "acc: required field is missing"),
        (#"{"t":1793197938,"lat":NaN,"lon":2,"acc":5}"#, "payload is not valid JSON"),
        (#"{"t":1793197938,"lat":Infinity,"lon":2,"acc":5}"#, "payload is not valid JSON"),
        (#"{"t":1793197938,"lat":1e400,"lon":2,"acc":5}"#, "payload is not valid JSON"),
        (#"{"t":1793197938,"lat":91,"lon":2,"acc":5}"#, "lat: 91.0 is outside -90…90"),
        (#"{"t":1793197938,"lat":1,"lon":-180.5,"acc":5}"#, "lon: -180.5 is outside -180…180"),
        (#"{"t":1793197938,"lat":1,"lon":2,"acc":-1}"#, "acc: -1.0 is negative"),
        (#"{"t":1793197938,"lat":1,"lon":2,"acc":5,"course":400}"#, "course: 400.0 is outside 0…360"),
        (#"{"t":1793197938,"lat":1,"lon":2,"acc":5,"speed":5000}"#, "speed:"),
        (#"{"t":1793197938000,"lat":1,"lon":2,"acc":5}"#, "looks like milliseconds"),
        (#"{"t":12,"lat":1,"lon":2,"acc":5}"#, "before 2000-01-01"),
        (#"{"t":1893500000,"lat":1,"lon":2,"acc":5}"#, "in the future"),
        (#"{"t":true,"lat":1,"lon":2,"acc":5}"#, "t: expected a number"),
        (#"{"t":1793197938,"lat":null,"lon":2,"acc":5}"#, "lat: expected a number, found null"),
    ])
    func badInputNamesTheProblem(_ input: String, _ expected: String) {
        let found = problems(input)
        #expect(found.count == 1 && found[0].contains(expected), "got \(found)")
    }

    @Test func aBatchKeepsItsGoodFixes() {
        guard case .fixes(let results) = parse(#"""
            [{"t":1793197938,"lat":1,"lon":2,"acc":5},{"t":1793197939,"lat":"x","lon":2,"acc":5},{"t":1793197940,"lat":1,"lon":2,"acc":-3}]
            """#) else { Issue.record("refused whole batch"); return }
        #expect(results.count == 3)
        #expect((try? results[0].get()) != nil)
        guard case .failure(let second) = results[1], case .failure(let third) = results[2] else { Issue.record("bad elements passed"); return }
        #expect(second.message.hasPrefix("[1]") && second.message.contains("lat"))
        #expect(third.message.hasPrefix("[2]") && third.message.contains("acc"))
    }

    @Test func unknownFieldsAreAccepted() {
        #expect(problems(#"{"t":1793197938,"lat":1,"lon":2,"acc":5,"provider":"gps","extra":{"a":[1]}}"#).isEmpty)
    }

    @Test func oversizedPayloadsAreRefusedByTheirSize() {
        let huge = "[" + String(repeating: #"{"t":1793197938,"lat":1,"lon":2,"acc":5},"#, count: 30_000) + "]"
        let found = problems(huge)
        #expect(found.count == 1 && found[0].contains("over the 262144-byte limit"))
    }

    @Test func mockPolicy() {
        let fix = #"{"t":1793197938,"lat":1,"lon":2,"acc":5,"mock":true}"#
        guard case .fixes(let accepted) = parse(fix), case .success(let f)? = accepted.first else { Issue.record(); return }
        #expect(f.mock == true)
        let strict = FixParser(validator: FixValidator(mockPolicy: .reject))
        guard case .fixes(let refused) = strict.parseDevicePayload(Array(fix.utf8), nowMs: now),
              case .failure(let p)? = refused.first else { Issue.record(); return }
        #expect(p.message.hasPrefix("mock:"))
    }

    @Test func stalenessCeilingIsOffByDefaultAndWorksWhenSet() {
        let old = #"{"t":1500000000,"lat":1,"lon":2,"acc":5}"#
        #expect(problems(old).isEmpty)
        let strict = FixParser(validator: FixValidator(stalenessCeilingMs: 3_600_000))
        guard case .fixes(let results) = strict.parseDevicePayload(Array(old.utf8), nowMs: now),
              case .failure(let p)? = results.first else { Issue.record(); return }
        #expect(p.message.contains("staleness ceiling"))
    }

    @Test func speedAndCourseSentinelsBecomeAbsent() throws {
        guard case .fixes(let r) = parse(#"{"t":1793197938,"lat":1,"lon":2,"acc":5,"speed":-1,"course":-1,"vacc":-1}"#),
              case .success(let f)? = r.first else { Issue.record(); return }
        #expect(f.speedMps == nil && f.courseDeg == nil && f.verticalAccuracyM == nil)
    }
}

@Suite struct OwnTracksTests {
    let parser = FixParser(validator: FixValidator())

    @Test func locationIsConverted() {
        let payload = #"{"_type":"location","tst":1793197938,"lat":48.1,"lon":11.5,"acc":12,"vel":36,"cog":90,"alt":520,"vac":3,"batt":77,"tid":"ab"}"#
        guard case .fixes(let r) = parser.parseOwnTracksPayload(Array(payload.utf8), nowMs: now),
              case .success(let f)? = r.first else { Issue.record("refused"); return }
        #expect(f.timeMs == 1_793_197_938_000)
        #expect(abs((f.speedMps ?? 0) - 10) < 1e-9)  // 36 km/h
        #expect(f.courseDeg == 90 && f.altitudeM == 520 && f.verticalAccuracyM == 3 && f.batteryPct == 77)
        #expect(f.source == .ownTracks)
    }

    @Test func otherTypesAreIgnoredWithAReason() {
        let payload = #"{"_type":"waypoint","desc":"home"}"#
        #expect(parser.parseOwnTracksPayload(Array(payload.utf8), nowMs: now)
                == .ignored(reason: "OwnTracks _type 'waypoint' is not a location"))
    }

    @Test func missingFieldsAreNamed() {
        let payload = #"{"_type":"location","lat":48.1,"lon":11.5,"acc":12}"#
        guard case .refused(let p) = parser.parseOwnTracksPayload(Array(payload.utf8), nowMs: now) else { Issue.record(); return }
        #expect(p.message == "tst: required field is missing")
    }

    @Test func theAppsOtherTypesAreToldByType() {
        func other(_ json: String) -> OwnTracksOther { parser.parseOwnTracksOther(Array(json.utf8), nowMs: now) }
        #expect(other(#"{"_type":"transition","event":"leave","rid":"6da9cf","tst":1793197938}"#)
                == .transition(RegionTransition(region: "6da9cf", event: .leave, timeMs: 1_793_197_938_000, regionID: "6da9cf")))
        #expect(other(#"{"_type":"transition","event":"enter","tst":1793197938}"#)
                == .refused(InputProblem("desc: required field is missing (a transition names its region by desc or rid)")))
        #expect(other(#"{"_type":"transition","event":"enter","desc":"Home"}"#) == .refused(InputProblem("tst: required field is missing")))
        #expect(other(#"{"_type":"transition","event":"enter","desc":"Home","tst":1793197938000}"#)
                == .refused(InputProblem("tst: 1793197938000.0 looks like milliseconds; send seconds since 1970")))
        #expect(other(#"{"_type":"transition","event":"enter","desc":"Home","tst":1793197938,"lat":91,"lon":1}"#)
                == .refused(InputProblem("lat: 91.0 is outside -90…90")))
        #expect(other(#"{"_type":"waypoint","desc":"Home","lat":"48.1","lon":11.5,"rad":100,"tst":1}"#)
                == .region(OwnTracksRegion(name: "Home", latitude: 48.1, longitude: 11.5, radiusM: 100, createdS: 1)))
        #expect(other(#"{"_type":"waypoints","waypoints":[]}"#) == .regions([]))
        #expect(other(#"{"_type":"waypoints","waypoints":[{"lat":1}]}"#) == .refused(InputProblem("waypoints[0].desc: required field is missing")))
        #expect(other(#"{"_type":"lwt","tst":1}"#) == .lastWill)
        #expect(other(#"{"_type":"cmd","action":"reportLocation"}"#) == .ignored(type: "cmd"))
        #expect(other("not json") == .refused(InputProblem("payload is not valid JSON")))
    }

    @Test func aLocationWithoutAccGetsTheDocumentedDefault() {
        let payload = #"{"_type":"location","tst":1793197938,"lat":48.1,"lon":11.5}"#
        guard case .fixes(let r) = parser.parseOwnTracksPayload(Array(payload.utf8), nowMs: now),
              case .success(let f)? = r.first else { Issue.record("refused"); return }
        #expect(f.accuracyM == FixParser.ownTracksDefaultAccuracyM && FixParser.ownTracksDefaultAccuracyM == 10)
        // `null` is absent too; a given acc is kept as it is.
        for (acc, expected) in [("null", 10.0), ("0", 0.0), ("25", 25.0)] {
            let p = #"{"_type":"location","tst":1793197938,"lat":48.1,"lon":11.5,"acc":\#(acc)}"#
            guard case .fixes(let r) = parser.parseOwnTracksPayload(Array(p.utf8), nowMs: now),
                  case .success(let f)? = r.first else { Issue.record("refused \(acc)"); continue }
            #expect(f.accuracyM == expected, "acc \(acc)")
        }
    }

    @Test func numbersSentAsStringsAreReadAsRecorderReadsThem() {
        let payload = #"{"_type":"location","tst":"1793197938","lat":"48.1","lon":" 11.5","acc":"12","vel":"36","cog":"90","alt":"520","vac":"3","batt":"77"}"#
        guard case .fixes(let r) = parser.parseOwnTracksPayload(Array(payload.utf8), nowMs: now),
              case .success(let f)? = r.first else { Issue.record("refused"); return }
        #expect(f.timeMs == 1_793_197_938_000 && f.latitude == 48.1 && f.longitude == 11.5 && f.accuracyM == 12)
        #expect(abs((f.speedMps ?? 0) - 10) < 1e-9 && f.courseDeg == 90 && f.altitudeM == 520 && f.verticalAccuracyM == 3 && f.batteryPct == 77)
    }

    @Test(arguments: [(#""lat":"north""#, "lat: expected a number, got the string 'north'"),
                      (#""lat":"nan""#, "lat: expected a number, got the string 'nan'"),
                      (#""lat":"""#, "lat: expected a number, got the string ''"),
                      (#""lat":true"#, "lat: expected a number"),
                      (#""lat":"91""#, "lat: 91.0 is outside -90…90")])
    func aStringThatIsNotANumberIsStillRefused(_ field: String, _ message: String) {
        let payload = #"{"_type":"location","tst":1793197938,\#(field),"lon":11.5}"#
        switch parser.parseOwnTracksPayload(Array(payload.utf8), nowMs: now) {
        case .refused(let p): #expect(p.message == message)
        case .fixes(let r):
            guard case .failure(let p)? = r.first else { Issue.record("accepted \(field)"); return }
            #expect(p.message == message)
        case .ignored: Issue.record("ignored \(field)")
        }
    }
}

@Suite struct DuplicateKeyTests {
    let parser = FixParser(validator: FixValidator())

    @Test(arguments: [#"{"lat":1,"lat":91,"lon":2,"t":1793197938,"acc":5}"#, #"{"lat":91,"lat":1,"lon":2,"t":1793197938,"acc":5}"#,
                      #"[{"t":1793197938,"lat":1,"lon":2,"acc":5,"acc":6}]"#])
    func aKeyGivenTwiceIsRefusedWhicheverComesFirst(_ payload: String) {
        guard case .refused(let problem) = parser.parseDevicePayload(Array(payload.utf8), nowMs: 1_793_197_938_000) else {
            Issue.record("accepted \(payload)"); return
        }
        #expect(problem.message.contains("appears twice"))
    }

    @Test func theSameKeyInDifferentObjectsIsFine() {
        #expect(DuplicateKeys.first(in: Array(#"[{"a":1,"b":{"a":2}},{"a":3,"s":"\"a\""}]"#.utf8)) == nil)
        #expect(DuplicateKeys.first(in: Array(#"{"x":[1,{"y":1,"y":2}]}"#.utf8)) == "y")
    }
}
