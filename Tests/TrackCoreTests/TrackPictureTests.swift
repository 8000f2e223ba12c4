import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Model
import Testing
import TrackCore

/// The picture is well-formed SVG with one line per moving and gap segment,
/// a circle per stop, arrows, start and end, and a scale bar.
@Suite struct TrackPictureTests {
    @Test func aTrackWithAStopAndAGapIsDrawnWithEveryPart() throws {
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        func p(_ seq: Int, _ t: Double, _ x: Double, _ speed: Double) -> StoredPoint {
            let (lat, lon) = frame.toGeo(x: x, y: x / 3)
            return StoredPoint(point: TrackPoint(seq: Int64(seq), sessionID: "s", timeMs: Int64(t * 1000), latitude: lat, longitude: lon,
                                                 accuracyM: 5, speedMps: speed, odometerM: 0))
        }
        var points = (0..<100).map { p($0 + 1, Double($0), Double($0) * 12, 12) }
        points += (0..<60).map { p($0 + 101, 100 + Double($0) * 5, 1_200, 0) }
        points += (0..<50).map { p($0 + 161, 400 + Double($0), 1_200 + Double($0) * 12, 12) }
        points += (0..<50).map { p($0 + 211, 1_500 + Double($0), 4_000 + Double($0) * 12, 12) }
        let track = TrackBuilder().build(points, device: DeviceID("pic")!, sessionID: "s")
        #expect(track.segments.map(\.kind) == [.moving, .stop, .moving, .gap, .moving])
        final class Counter: NSObject, XMLParserDelegate {
            var elements: [String: Int] = [:], dashed = 0
            func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String]) {
                elements[name, default: 0] += 1
                if attributes["stroke-dasharray"] != nil { dashed += 1 }
            }
        }
        let counter = Counter()
        let parser = XMLParser(data: Data(TrackPicture.svg(track).utf8))
        parser.delegate = counter
        #expect(parser.parse(), "\(String(describing: parser.parserError))")
        #expect(counter.elements["polyline"] == 4)  // three moving, one gap
        #expect(counter.dashed == 2)  // the gap and its legend entry
        #expect(counter.elements["circle"] == 2)  // the stop and the start
        #expect((counter.elements["path"] ?? 0) >= 4)  // arrows
    }
}
