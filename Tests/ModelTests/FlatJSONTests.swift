import Foundation
import Model
import TestSupport
import Testing

/// The fast reader must agree with JSONDecoder wherever it answers, and step
/// aside (nil) for everything unusual.
@Suite struct FlatJSONTests {
    @Test func agreesWithJSONDecoderOnEveryRecordedFix() throws {
        var count = 0
        for name in ["city-run.jsonl", "munich-drive.jsonl", "posmo-train.jsonl", "pixel6-walk.jsonl", "mtv-drive-truth.jsonl"] {
            for line in try Fixtures.lines(name) {
                let fast = try #require(DeviceFix(flat: Array(line.utf8)), "\(name): \(line)")
                #expect(fast == (try JSONCoding.decoder.decode(DeviceFix.self, from: Data(line.utf8))))
                count += 1
            }
        }
        #expect(count > 4_000)
    }

    @Test func rawFixesRoundTripThroughTheWriter() throws {
        let d = DeviceID("p-1")!
        for fix in [
            RawFix(device: d, seq: 1, sessionID: nil, timeMs: 1, receivedMs: 2, source: .device, latitude: -33.9, longitude: 151.2, accuracyM: 0),
            RawFix(device: d, seq: 9_007_199_254_740_993, sessionID: "a-b", timeMs: 1_793_197_938_549, receivedMs: 1_795_985_074_064,
                   source: .ownTracks, latitude: 37.331821, longitude: -122.030386, accuracyM: 10.5, speedMps: 1.54,
                   courseDeg: 263.6, altitudeM: -3.25, verticalAccuracyM: 4, mock: true, batteryPct: 77),
        ] {
            let bytes = JSONCoding.bytes(fix)
            #expect(RawFix(flat: bytes) == fix)
            #expect(RawFix(flat: bytes) == (try JSONCoding.decoder.decode(RawFix.self, from: Data(bytes))))
        }
    }

    @Test func pointMessagesRoundTripThroughTheWriter() throws {
        let d = DeviceID("p-1")!
        for point in [
            TrackPoint(seq: 1, sessionID: nil, timeMs: 1, latitude: -33.9, longitude: 151.2, accuracyM: 0, odometerM: 0),
            TrackPoint(seq: 9_007_199_254_740_993, sessionID: "a-b", timeMs: 1_793_197_938_549, latitude: 37.331821,
                       longitude: -122.030386, accuracyM: 10.5, speedMps: 1.54, courseDeg: 263.6, odometerM: 12_345.678),
        ] {
            for message in [PointMessage(device: d, point: point), PointMessage(device: d, point: point, epoch: "e-1"),
                            PointMessage(device: d, point: point, epoch: "e", measured: MeasuredFix(latitude: 1.5, longitude: -2, accuracyM: 12.25,
                                                                                                      speedMps: 3, courseDeg: 90))] {
                let bytes = JSONCoding.bytes(message)
                #expect(PointMessage(flat: bytes) == message)
                #expect(PointMessage(flat: bytes) == (try JSONCoding.decoder.decode(PointMessage.self, from: Data(bytes))))
            }
            // A point alone, as the uploader's queue stores it.
            let bytes = JSONCoding.bytes(point)
            #expect(TrackPoint(flat: bytes) == point)
            #expect(TrackPoint(flat: bytes) == (try JSONCoding.decoder.decode(TrackPoint.self, from: Data(bytes))))
        }
        // Deeper nesting, arrays and escapes are JSONDecoder's.
        for odd in [#"{"device":"p","point":{"seq":1,"timeMs":1,"latitude":1,"longitude":2,"accuracyM":5,"odometerM":0,"x":{"y":1}}}"#,
                    #"{"device":"p","point":{"seq":1,"timeMs":1,"latitude":1,"longitude":2,"accuracyM":5,"odometerM":0,"x":[1]}}"#,
                    #"{"device":"p","point":{"seq":1,"sessionID":"a\"b","timeMs":1,"latitude":1,"longitude":2,"accuracyM":5,"odometerM":0}}"#,
                    #"{"device":"p","point":{"seq":1,"timeMs":1,"latitude":1,"longitude":2,"accuracyM":5}}"#] {
            #expect(PointMessage(flat: Array(odd.utf8)) == nil, "\(odd)")
        }
        for odd in [#"{"seq":1,"timeMs":1,"latitude":1,"longitude":2,"accuracyM":5,"odometerM":0,"x":{"y":1}}"#,
                    #"{"seq":1,"sessionID":"a\"b","timeMs":1,"latitude":1,"longitude":2,"accuracyM":5,"odometerM":0}"#,
                    #"{"seq":1,"timeMs":1,"latitude":1,"longitude":2,"accuracyM":5}"#] {
            #expect(TrackPoint(flat: Array(odd.utf8)) == nil, "\(odd)")
        }
    }

    @Test func motionMessagesRoundTripThroughTheWriter() throws {
        let d = DeviceID("p-1")!
        for message in [MotionMessage(device: d, seq: 1, timeMs: 1, state: .stationary),
                        MotionMessage(device: d, seq: 9_007_199_254_740_993, timeMs: 1_793_197_938_549, state: .stopPending, epoch: "e-1", prev: 4)] {
            let bytes = JSONCoding.bytes(message)
            #expect(MotionMessage(flat: bytes) == message)
            #expect(MotionMessage(flat: bytes) == (try JSONCoding.decoder.decode(MotionMessage.self, from: Data(bytes))))
        }
        // A state this build does not know, or a device id that is not one, is JSONDecoder's to refuse.
        for odd in [#"{"device":"p","seq":1,"timeMs":1,"state":"flying"}"#, #"{"device":"a b","seq":1,"timeMs":1,"state":"moving"}"#,
                    #"{"device":"p","seq":1,"timeMs":1}"#] {
            #expect(MotionMessage(flat: Array(odd.utf8)) == nil, "\(odd)")
        }
    }

    @Test(arguments: [
        #"{"t":1,"lat":1,"lon":2,"acc":5,"extra":{"a":1}}"#,   // nested: JSONDecoder's job
        #"{"t":1,"lat":1,"lon":2,"acc":5,"tags":[1]}"#,
        #"{"t":1,"lat":1,"lon":2,"acc":5,"note":"a\"b"}"#,      // escapes
        #"{"t":1,"lat":1,"lat":2,"lon":2,"acc":5}"#,             // duplicate key
        #"{"t":1e400,"lat":1,"lon":2,"acc":5}"#,                 // not finite
        #"{"t":01,"lat":1,"lon":2,"acc":5}"#,                    // leading zero
        #"{"t":1.,"lat":1,"lon":2,"acc":5}"#,
        #"{"t":"1","lat":1,"lon":2,"acc":5}"#,                   // wrong type
        #"{"t":1,"lat":1,"lon":2}"#,                             // missing field
        #"{"t":1,"lat":1,"lon":2,"acc":5,"mock":1}"#,
        #"{"t":1,"lat":1,"lon":2,"acc":5} x"#,                   // trailing garbage
        #"{"t":1,"lat":1,"lon":2,"acc":5,}"#,
        #"{"t":1,"lat":NaN,"lon":2,"acc":5}"#,
        #"[{"t":1,"lat":1,"lon":2,"acc":5}]"#,
        "",
    ])
    func stepsAsideForAnythingUnusual(_ input: String) {
        #expect(DeviceFix(flat: Array(input.utf8)) == nil)
    }

    @Test func acceptsWhitespaceNullsAndUnknownScalars() {
        let fix = DeviceFix(flat: Array(#" { "t" : 1793197938.5 , "lat":-1.5e-3,"lon":2,"acc":5,"speed":null,"provider":"gps","ok":true } "#.utf8))
        #expect(fix == DeviceFix(t: 1_793_197_938.5, lat: -0.0015, lon: 2, acc: 5))
    }
}
