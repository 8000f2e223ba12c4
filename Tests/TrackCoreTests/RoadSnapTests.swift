import Foundation
import Model
import Testing
import TrackCore

@Suite struct RoadSnapTests {
    let frame = LocalFrame(originLat: 48.1, originLon: 11.5)

    func track(vertices: Int) -> Track {
        let points = (0..<vertices).map { i -> StoredPoint in
            let (lat, lon) = frame.toGeo(x: Double(i) * 12, y: 0)
            return StoredPoint(point: TrackPoint(seq: Int64(i + 1), sessionID: "s", timeMs: Int64(i) * 1000, latitude: lat, longitude: lon,
                                                 accuracyM: 5, speedMps: 12, odometerM: Double(i) * 12))
        }
        var options = TrackOptions()
        options.simplifyToleranceM = 0
        options.smooth = false
        return TrackBuilder(options: options).build(points, device: DeviceID("d")!, sessionID: "s")
    }

    @Test func longLinesGoInJoinedChunksOfAHundred() {
        let vertices = track(vertices: 250).segments[0].vertices
        let urls = RoadSnapper(baseURL: "http://osrm.local:5000/").requests(for: vertices)
        #expect(urls.count == 3)
        #expect(urls.allSatisfy { $0.hasPrefix("http://osrm.local:5000/match/v1/driving/") && $0.contains("geometries=geojson") })
        let counts = urls.map { $0.split(separator: "?")[0].split(separator: ";").count }
        #expect(counts == [100, 100, 52])  // each chunk starts where the last ended
    }

    @Test func aMatchedLineReplacesTheMovingSegment() {
        let original = track(vertices: 50)
        // The "road": the same line 20 m north.
        let road = (0..<50).map { i -> [Double] in let (lat, lon) = frame.toGeo(x: Double(i) * 12, y: 20); return [lon, lat] }
        let body = try! JSONSerialization.data(withJSONObject: ["code": "Ok", "matchings": [["geometry": ["type": "LineString", "coordinates": road]]]])
        let snapped = RoadSnapper(baseURL: "http://osrm.local").snap(original) { _ in .success(body) }
        #expect(snapped.roadSnapped == true && snapped.diagnostics == nil)
        let line = snapped.segments[0].vertices
        #expect(line.count == 50 && abs(line[10].latitude - road[10][1]) < 1e-9)
        #expect(line.first?.timeMs == original.segments[0].startMs && line.last?.timeMs == original.segments[0].endMs)
    }

    @Test func aFailingServerLeavesTheTrackUnsnappedAndSaysWhy() {
        let original = track(vertices: 50)
        let refused = RoadSnapper(baseURL: "http://osrm.local").snap(original) { _ in .failure(SnapError("connection refused")) }
        #expect(refused.segments == original.segments && refused.roadSnapped == nil)
        #expect(refused.diagnostics == ["roadSnap: connection refused; the track is not snapped"])
        let noMatch = try! JSONSerialization.data(withJSONObject: ["code": "NoMatch", "message": "Could not match the trace."])
        let unmatched = RoadSnapper(baseURL: "http://osrm.local").snap(original) { _ in .success(noMatch) }
        #expect(unmatched.diagnostics?.first?.contains("NoMatch") == true)
    }
}
