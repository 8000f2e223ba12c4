@testable import FilterCore
import Foundation
import Testing
import TestSupport

/// The device's error persistence, learned from normalized innovations.
@Suite struct NoiseCorrelationTests {
    /// Innovations with lag-one correlation `rho`, a second apart.
    func learned(rho: Double, count: Int, seed: UInt64 = 7) -> NoiseCorrelation {
        var rng = SeededRandom(seed: seed)
        var noise = NoiseCorrelation()
        var (e, n) = (0.0, 0.0)
        let kick = (1 - rho * rho).squareRoot()
        for i in 0..<count {
            e = rho * e + kick * rng.gaussian()
            n = rho * n + kick * rng.gaussian()
            noise.add(east: e, north: n, timeMs: Int64(i) * 1000)
        }
        return noise
    }

    @Test func independentErrorsInflateNothing() {
        #expect(learned(rho: 0, count: 600).inflation < 1.15)
    }

    @Test func aWanderingErrorInflatesAsAnAverageOfItWould() {
        // ρ 0.8: √(1.8 / 0.2) = 3.
        let inflation = learned(rho: 0.8, count: 600).inflation
        #expect((2.4...3.6).contains(inflation), "\(inflation)")
    }

    @Test func nothingIsConcludedFromAFewFixes() {
        #expect(learned(rho: 0.9, count: 10).inflation == 1)
    }

    @Test func onlyConsecutiveFixesPair() {
        // The same wandering error, but every pair broken by a pause: nothing learned.
        var noise = NoiseCorrelation()
        for i in 0..<600 {
            noise.add(east: 1, north: 1, timeMs: Int64(i) * 1000)
            noise.interrupt()
        }
        #expect(noise.inflation == 1)
        // Fixes 5 s apart do not pair either.
        var sparse = NoiseCorrelation()
        for i in 0..<600 { sparse.add(east: 1, north: 1, timeMs: Int64(i) * 5000) }
        #expect(sparse.inflation == 1)
    }

    @Test func nearlyWhiteErrorsLetTheFilterFollowThePositionsCloser() {
        // Independent errors average out in the smoother; persisting ones would be driven.
        let white = FilterCore.noDopplerQFactor(learned(rho: 0, count: 600))
        #expect(white > 2.2 && white <= FilterCore.whiteNoDopplerQFactor, "\(white)")
        #expect(FilterCore.noDopplerQFactor(learned(rho: 0.8, count: 600)) == FilterCore.noDopplerQFactor)
        #expect(FilterCore.noDopplerQFactor(learned(rho: 0, count: 10)) == FilterCore.noDopplerQFactor, "not learned yet")
        #expect(FilterCore.noDopplerQFactor(nil) == FilterCore.noDopplerQFactor)
    }

    @Test func theStateWithoutItStillDecodes() throws {
        // State saved before the field existed (version 1, without the key): nil, learned afresh.
        var object = try SavedStateFixtureTests.version1State("munich-no-doppler")
        #expect(object["noise"] != nil)
        object["noise"] = nil
        let decoded = try JSONDecoder().decode(DeviceFilterState.self, from: JSONSerialization.data(withJSONObject: object))
        #expect(decoded.kalman.noise == nil)
    }
}
