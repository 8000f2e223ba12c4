import FilterCore
import Foundation
import Model
import TestSupport
import Testing
import TrackCore

@Suite struct TrackBuilderTests {
    let device = DeviceID("t1")!
    let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
    let t0: Int64 = 1_790_000_000_000

    /// A point `x` metres east (and `y` north) at `t` seconds, odometer by hand.
    func point(_ seq: Int, t: Double, x: Double, y: Double = 0, speed: Double? = nil) -> StoredPoint {
        let (lat, lon) = frame.toGeo(x: x, y: y)
        return StoredPoint(point: TrackPoint(seq: Int64(seq), sessionID: "s", timeMs: t0 + Int64(t * 1000), latitude: lat, longitude: lon,
                                             accuracyM: 5, speedMps: speed, odometerM: 0),
                           measured: MeasuredFix(latitude: lat, longitude: lon, accuracyM: 5, speedMps: speed, courseDeg: speed.map { _ in 90 }))
    }

    func kinds(_ track: Track) -> [Segment.Kind] { track.segments.map(\.kind) }

    @Test func cityRunIsOneMovingSegmentOfItsLength() throws {
        let fixes = try Fixtures.fixes("city-run.jsonl")
        var state = DeviceFilterState()
        let points = fixes.enumerated().compactMap { i, f -> StoredPoint? in
            FilterCore().judge(FilterInput(f, seq: Int64(i + 1)), state: &state).point.map {
                StoredPoint(point: $0, measured: MeasuredFix(latitude: f.lat, longitude: f.lon, accuracyM: f.acc, speedMps: f.speed, courseDeg: f.course))
            }
        }
        let track = TrackBuilder().build(points, device: device, sessionID: "s")
        #expect(track.statistics.movingSegments >= 1 && track.statistics.stops == 0 && track.statistics.gaps == 0)
        #expect(track.segments.allSatisfy { $0.kind == .moving })
        #expect((80...130).contains(track.statistics.observedDistanceM), "\(track.statistics.observedDistanceM) m")
        #expect(track.version == 1)
    }

    /// Drive, stop 5 min (drifting), drive through a 3-minute tunnel, stop again, drive on.
    @Test func aDriveWithTwoStopsAndATunnelHasTwoStopNodesAndNoGap() {
        var points: [StoredPoint] = [], seq = 0, t = 0.0, x = 0.0
        var rng = SeededRandom(seed: 3)
        func drive(_ seconds: Int) { for _ in 0..<seconds { seq += 1; t += 1; x += 12; points.append(point(seq, t: t, x: x, speed: 12)) } }
        func stand(_ seconds: Int) {
            for _ in stride(from: 0, to: seconds, by: 5) { seq += 1; t += 5; points.append(point(seq, t: t, x: x + rng.gaussian() * 3, y: rng.gaussian() * 3, speed: 0)) }
        }
        drive(120); stand(300); drive(60)
        t += 180; x += 180 * 12  // the tunnel: three minutes, 2 km, no fix
        drive(60); stand(400); drive(30)
        let track = TrackBuilder().build(points, device: device, sessionID: "s")
        #expect(kinds(track).filter { $0 == .stop }.count == 2, "\(kinds(track))")
        #expect(!kinds(track).contains(.gap))
        let stops = track.segments.compactMap(\.stop)
        #expect(stops.allSatisfy { $0.durationSec >= 290 })
        // Each stop is one node, near where the van stood; the tunnel is inside a moving segment.
        #expect(track.segments.filter { $0.kind == .stop }.allSatisfy { $0.vertices.count == 1 })
        #expect(abs(track.statistics.stoppedSec - 700) < 30, "\(track.statistics.stoppedSec)")
    }

    /// Fifteen minutes dark, resuming 2 km away: one gap, drawn as its two ends, adding nothing to the observed distance.
    @Test func aLongSilenceFarAwayIsAGapAndAParkedNightIsNot() {
        var points = (0..<60).map { point($0 + 1, t: Double($0), x: Double($0) * 10, speed: 10) }
        points += (0..<60).map { point($0 + 61, t: 900 + 60 + Double($0), x: 2_600 + Double($0) * 10, speed: 10) }
        let track = TrackBuilder().build(points, device: device, sessionID: "s")
        #expect(kinds(track) == [.moving, .gap, .moving], "\(kinds(track))")
        let gap = track.segments[1]
        #expect(gap.vertices.count == 2 && gap.distanceM == 0 && gap.speedBand == nil && gap.arrows == nil)
        #expect(gap.gapDistanceM.map { (1_990...2_020).contains($0) } == true)
        #expect((1_150...1_220).contains(track.statistics.observedDistanceM), "\(track.statistics.observedDistanceM)")
        // Parked overnight: eight hours dark, resuming 20 m away — a stop, not a gap.
        var night = (0..<60).map { point($0 + 1, t: Double($0), x: Double($0) * 10, speed: 10) }
        night += (0..<60).map { point($0 + 61, t: 8 * 3600 + Double($0), x: 610 + Double($0) * 10, speed: 10) }
        let parked = TrackBuilder().build(night, device: device, sessionID: "s")
        #expect(kinds(parked) == [.moving, .stop, .moving], "\(kinds(parked))")
    }

    @Test func simplificationKeepsTheEndsAndArrowsPointTheWay() {
        // East 1.2 km, then north 1.2 km, at 12 m/s.
        var points = (0...100).map { point($0 + 1, t: Double($0), x: Double($0) * 12, speed: 12) }
        points += (1...100).map { point($0 + 101, t: 100 + Double($0), x: 1_200, y: Double($0) * 12, speed: 12) }
        var options = TrackOptions()
        options.simplifyToleranceM = 5
        options.arrowEveryM = 500
        let track = TrackBuilder(options: options).build(points, device: device, sessionID: "s")
        let moving = track.segments.filter { $0.kind == .moving }
        #expect(moving.count == 1)
        let line = moving[0].vertices
        #expect(line.count <= 15, "\(line.count) vertices")  // a rounded corner, not 201 points
        #expect(line.first?.timeMs == t0 && line.last?.timeMs == t0 + 200_000)
        // Arrows every 500 m from 250 m: two heading east, then north (within 15°: the corner is rounded).
        let bearings = (moving[0].arrows ?? []).map(\.bearingDeg)
        func off(_ a: Double, _ b: Double) -> Double { abs((a - b + 540).truncatingRemainder(dividingBy: 360) - 180) }
        #expect(bearings.count == 5, "\(bearings)")
        #expect(bearings.prefix(2).allSatisfy { off($0, 90) < 15 } && bearings.suffix(2).allSatisfy { off($0, 0) < 15 }, "\(bearings)")
        #expect((2_300...2_420).contains(moving[0].distanceM), "\(moving[0].distanceM)")
    }

    /// The look-ahead smoother on the noisy survey drive with Doppler: closer
    /// to the truth than the live points, and the length within 2 %.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func theSmoothedTrackBeatsTheLivePoints(seed: UInt64) throws {
        let score = try TrackScore.score(NoiseVariant("default"), seed: seed * 7919)
        #expect(score.rmseRatio < 0.8, "\(score)")
        #expect(abs(score.lengthError) < 0.02, "\(score)")
    }

    /// Correlated noise and sparse fixes: never worse than the live points
    /// (measured means 0.77, 0.80).
    @Test(arguments: [NoiseVariant("ρ 0.8", correlation: 0.8), NoiseVariant("every 5 s", every: 5)])
    func theSmootherHelpsOnHarderNoise(variant: NoiseVariant) throws {
        for seed in [1, 2] as [UInt64] {
            let score = try TrackScore.score(variant, seed: seed * 7919)
            #expect(score.rmseRatio < 0.92, "\(variant.name): \(score)")
        }
    }

    /// Without Doppler the filter publishes its points already smoothed over
    /// the fixes after them: the track keeps them, never worse.
    @Test func pointsTheFilterSmoothedAreKept() throws {
        for seed in [1, 2] as [UInt64] {
            let score = try TrackScore.score(NoiseVariant("no speed", withSpeed: false), seed: seed * 7919)
            #expect(score.rmseRatio <= 1.0 && score.rmseRatio > 0.97, "\(score)")
        }
    }

    @Test func optionsOutOfRangeAreRefusedByName() {
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(TrackOptions.self, from: Data(#"{"stopMinSec":-1}"#.utf8)) }
        let defaults = try? JSONDecoder().decode(TrackOptions.self, from: Data("{}".utf8))
        #expect(defaults == TrackOptions())
    }
}
