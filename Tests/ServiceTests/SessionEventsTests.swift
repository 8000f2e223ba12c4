import Foundation
import Model
@testable import Motion
import Testing

/// Motion reads the gateway's session events on a fast path: it must say
/// what JSONDecoder says wherever it answers, and step aside otherwise.
@Suite struct SessionEventsTests {
    static let device = DeviceID("van-7")!

    @Test func agreesWithJSONDecoderOnSessionEvents() throws {
        let sessions = [Session(id: "s-1", device: Self.device, tag: nil, startMs: 1_793_197_938_000, auto: true),
                        Session(id: "s-2", device: Self.device, tag: "route 7", startMs: 5, endMs: 9, auto: false)]
        for session in sessions {
            for body in [Event.Body.sessionStarted(session), .sessionStopped(session)] {
                let payload = JSONCoding.bytes(Event(device: Self.device, timeMs: 10, body))
                let read = try #require(SessionEvents.read(payload))
                let decoded = try JSONCoding.decoder.decode(Event.self, from: Data(payload))
                switch decoded.body {
                case .sessionStarted(let s): #expect(read.started && read.sessionID == s.id)
                case .sessionStopped(let s): #expect(!read.started && read.sessionID == s.id)
                default: Issue.record("not a session event")
                }
            }
        }
    }

    @Test func stepsAsideForOtherEventsAndAnythingUnusual() {
        let escaped = Session(id: "s-3", device: Self.device, tag: "a \"quoted\" tag", startMs: 5)
        let point = TrackPoint(seq: 1, sessionID: "s", timeMs: 1, latitude: 1, longitude: 2, accuracyM: 3, odometerM: 0)
        for body in [Event.Body.sessionStarted(escaped), .location(point)] {
            #expect(SessionEvents.read(JSONCoding.bytes(Event(device: Self.device, timeMs: 10, body))) == nil)
        }
        for odd in [#"{"type":"sessionStarted","session":{"id":"s"}}"#,
                    #"{"type":"sessionStopped","session":{"id":"s","device":"van","startMs":1,"tag":5}}"#,
                    #"{"device":"van","timeMs":1,"type":"sessionStopped","session":{"id":"s","device":"van","startMs":1,"auto":"yes"}}"#,
                    #"{"timeMs":1,"type":"sessionStopped","session":{"id":"s","device":"van","startMs":1}}"#, #"{"type":"sessionEnded","session":{"id":"s","device":"d","startMs":1}}"#,
                    #"{"type":"sessionStarted","session":{"id":"s","device":"not a device","startMs":1}}"#, "[]"] {
            #expect(SessionEvents.read(Array(odd.utf8)) == nil, "\(odd)")
        }
    }
}
