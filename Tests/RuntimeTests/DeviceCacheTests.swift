import Model
@testable import Runtime
import Testing

/// The device cache drops silent devices, then devices it loaded and has
/// not used again, then the least recently used, and keeps what a batch
/// changed.
struct DeviceCacheTests {
    func device(_ n: Int) -> DeviceID { DeviceID("d\(n)")! }

    /// A cache holding devices 0..<n, each loaded and used again (so
    /// least recently used goes first among them).
    func cache(capacity: Int, holding n: Int) -> DeviceCache<Int> {
        let cache = DeviceCache<Int>(capacity: capacity)
        for i in 0..<n { load(cache, i) }
        return cache
    }

    /// Device `n` loaded, and used again in a later batch.
    func load(_ cache: DeviceCache<Int>, _ n: Int) {
        cache.insertClean(device(n), n, storedBytes: 10)
        cache.markClean()
        _ = cache.get(device(n))
    }

    func held(_ cache: DeviceCache<Int>, _ range: Range<Int>) -> [Int] { range.filter { cache.get(device($0)) != nil } }

    /// Drives a cache as the host does: a device's message loads it when it
    /// is not cached, and after every `batch` turns the batch commits and the
    /// cache evicts.
    final class Messages {
        let cache: DeviceCache<Int>
        let batch: Int
        private var inBatch = 0

        init(_ cache: DeviceCache<Int>, batch: Int) { self.cache = cache; self.batch = batch }

        /// A turn of device `n`, `fixes` messages at once (in one batch):
        /// whether its device was cached.
        @discardableResult func from(_ n: Int, fixes: Int = 1) -> Bool {
            let device = DeviceID("d\(n)")!
            let hit = cache.get(device) != nil
            if !hit { cache.insertClean(device, n, storedBytes: 10) }
            for _ in 1..<fixes { _ = cache.get(device) }
            inBatch += 1
            if inBatch == batch {
                inBatch = 0
                cache.markClean()
                cache.evictIfNeeded()
            }
            return hit
        }
    }

    @Test func evictsTheLeastRecentlyUsedFirst() {
        let cache = cache(capacity: 5, holding: 5)
        _ = cache.get(device(0))
        load(cache, 5)
        load(cache, 6)
        cache.evictIfNeeded()
        // Down to 80 % of 5: the three used longest ago go, d0 (used again) stays.
        #expect(cache.count == 4)
        #expect(held(cache, 0..<7) == [0, 4, 5, 6])
    }

    @Test func keepsChangedEntriesAsOldAsTheyWere() {
        let cache = cache(capacity: 5, holding: 7)
        cache.modify(device(0)) { $0 += 100 }
        cache.evictIfNeeded()
        #expect(held(cache, 0..<7) == [0, 4, 5, 6])
        #expect(cache.get(device(0)) == 100)
        // Written and clean again, d0 is still the oldest use: it goes first (then d3).
        cache.markClean()
        let again = self.cache(capacity: 5, holding: 0)
        for i in 0..<6 { load(again, i) }
        again.modify(device(0)) { $0 += 1 }
        again.evictIfNeeded()
        again.markClean()
        load(again, 6)
        load(again, 7)
        again.evictIfNeeded()
        #expect(held(again, 0..<8) == [4, 5, 6, 7])
    }

    @Test func evictsByBytesInUseOrder() {
        let cache = DeviceCache<Int>(capacity: 1_000, budgetBytes: 5 * DeviceCache<Int>.cost(storedBytes: 10))
        for i in 0..<6 { load(cache, i) }
        _ = cache.get(device(1))
        cache.evictIfNeeded()
        // Down to 80 % of the budget: the two used longest ago go.
        #expect(cache.bytes <= 4 * DeviceCache<Int>.cost(storedBytes: 10))
        #expect(held(cache, 0..<6) == [1, 3, 4, 5])
    }

    @Test func theListOfUsesStaysBoundedWhileNothingIsEvicted() {
        let cache = cache(capacity: 10, holding: 3)
        for i in 0..<100_000 { _ = cache.get(device(i % 3)) }
        #expect(cache.listedUses <= 2 * 3 + 1_024 + 1)
        // Still in use order after the clearing: d1, d2, d0 (last used in
        // that order) go first, then d3 and d4.
        for i in 3..<13 { load(cache, i) }
        cache.evictIfNeeded()
        #expect(held(cache, 0..<13) == Array(5..<13))
    }

    @Test func theUseThatClearsTheListCounts() {
        let cache = cache(capacity: 10, holding: 3)
        // Three loads (six uses) and 1,025 uses: the last use, of d1, clears the list.
        for k in 0..<1_025 { _ = cache.get(device(k % 3)) }
        #expect(cache.listedUses <= 4)
        for i in 3..<13 { load(cache, i) }
        cache.evictIfNeeded()
        // d2, d0 and d1 were used before the ten new devices: all three go, then d3 and d4.
        #expect(held(cache, 0..<13) == Array(5..<13))
    }

    @Test func aDiscardedEntryLoadsAgainAsNew() {
        let cache = cache(capacity: 5, holding: 5)
        cache.modify(device(1)) { $0 += 100 }
        cache.discardDirty()
        #expect(cache.get(device(1)) == nil)
        load(cache, 1)
        load(cache, 5)
        cache.evictIfNeeded()
        // d1's uses before it was discarded no longer count: loaded again, it is young.
        #expect(held(cache, 0..<6) == [1, 3, 4, 5])
    }

    /// Entries lie side by side, and a removed one's place is taken by the
    /// last: every device still finds its own entry after evictions from
    /// the middle and a discarded batch.
    @Test func everyDeviceFindsItsOwnEntryAfterRemovals() {
        let cache = cache(capacity: 10, holding: 10)
        for i in stride(from: 0, to: 10, by: 2) { _ = cache.get(device(i)) }
        for i in 10..<13 { load(cache, i) }
        cache.evictIfNeeded()
        cache.modify(device(12)) { $0 += 100 }
        cache.discardDirty()
        let held = held(cache, 0..<13)
        #expect(held == [0, 2, 4, 6, 8, 10, 11])
        for i in held { #expect(cache.get(device(i)) == i) }
        #expect(cache.bytes == held.count * DeviceCache<Int>.cost(storedBytes: 10))
    }

    /// An entry's inline size counts, though it lies apart from its slot:
    /// a filter row is hundreds of bytes inline, and leaving them out let a
    /// budget hold a whole 10,000-device fleet (5 MB more resident).
    @Test func anEntryCountsItsInlineSize() {
        typealias Wide = (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int)
        let narrow = DeviceCache<Int>.cost(storedBytes: 10), wide = DeviceCache<Wide>.cost(storedBytes: 10)
        #expect(wide - narrow == MemoryLayout<Wide>.stride - MemoryLayout<Int>.stride)
    }

    /// The newest-loaded pass looks for as many entries not used again as
    /// there are, and no further: the count it stops on stays true through
    /// loads, reloads, uses, evictions and a discarded batch.
    @Test func theCountOfEntriesNotUsedAgainStaysTrue() {
        let cache = DeviceCache<Int>(capacity: 40)
        var random = SplitMix(seed: 28)
        for round in 0..<2_000 {
            let n = Int.random(in: 0..<60, using: &random)
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4: cache.insertClean(device(n), n, storedBytes: 10)
            case 4..<8: _ = cache.get(device(n))
            case 8: cache.modify(device(n)) { $0 += 1 }
            default: if round % 7 == 0 { cache.discardDirty() } else { cache.markClean(); cache.evictIfNeeded() }
            }
            let counts = cache.loadedOnlyCounts
            #expect(counts.kept == counts.recounted, "after round \(round)")
            if counts.kept != counts.recounted { return }
        }
    }

    /// A fleet speaking in turn, larger than the cache, as the host uses it:
    /// a device loads when it is not cached, and eviction runs after each
    /// batch. Least recently used alone, every message would miss. Each
    /// device sends two fixes at once, which does not make it one the
    /// cache reuses.
    @Test(arguments: [120, 1_000])
    func aFleetLargerThanTheCacheSpeakingInTurnStillHitsMostly(fleet: Int) {
        let cache = DeviceCache<Int>(capacity: 100), messages = Messages(cache, batch: 20)
        var hitsInRound: [Int] = []
        for _ in 0..<10 {
            var hits = 0
            for d in 0..<fleet {
                if messages.from(d, fixes: 2) { hits += 1 }
            }
            hitsInRound.append(hits)
            #expect(cache.count <= 100)
        }
        // The cache keeps 80 of the fleet from round to round (ten times
        // the cache: its devices speak many times its size apart, yet are not silent).
        #expect(hitsInRound.suffix(5).allSatisfy { $0 >= 75 }, "hits in each round: \(hitsInRound)")
    }

    /// Devices silent for long make way, even for devices that have not
    /// been used again yet (which otherwise go first): once the cache has
    /// seen four times as many uses as it has entries without them.
    @Test func devicesThatFellSilentMakeWayForThoseThatSpeak() {
        let cache = cache(capacity: 10, holding: 8), messages = Messages(cache, batch: 8)
        // Devices 100… speak once a round (a batch), and 0…7 are silent.
        var missesInRound: [Int] = []
        for _ in 0..<20 {
            missesInRound.append((100..<108).filter { !messages.from($0) }.count)
        }
        #expect(held(cache, 0..<8).isEmpty)
        #expect(held(cache, 100..<108) == Array(100..<108))
        #expect(missesInRound.suffix(5) == [0, 0, 0, 0, 0], "misses in each round: \(missesInRound)")
    }

    /// A device that spoke once and never again does not keep its place
    /// either: once the devices used again show how long a round of the
    /// fleet is, it goes after four rounds.
    @Test func aDeviceThatSpokeOnceMakesWayOnceTheFleetsRoundIsKnown() {
        let cache = DeviceCache<Int>(capacity: 100), messages = Messages(cache, batch: 20)
        for d in 1_000..<1_010 { cache.insertClean(device(d), d, storedBytes: 10) }
        cache.markClean()
        for _ in 0..<12 {
            for d in 0..<120 { messages.from(d) }
        }
        #expect(held(cache, 1_000..<1_010).isEmpty)
    }

    /// A fleet that changes as it goes (a tenth of it replaced every round,
    /// and devices that speak once in between) keeps its steady part: the
    /// round the cache waits for a device loaded once does not shrink while
    /// devices keep speaking that far apart.
    @Test func aFleetThatChangesAsItGoesKeepsHitting() {
        let messages = Messages(DeviceCache<Int>(capacity: 100), batch: 40)
        var fleet = Array(0..<1_000), next = 1_000, once = 100_000
        var hitsInRound: [Int] = []
        for round in 0..<30 {
            var hits = 0
            for (k, d) in fleet.enumerated() {
                if messages.from(d) { hits += 1 }
                if k % 50 == 0 { messages.from(once); once += 1 }
            }
            hitsInRound.append(hits)
            for i in stride(from: round % 10, to: fleet.count, by: 10) { fleet[i] = next; next += 1 }
        }
        #expect(hitsInRound.suffix(10).allSatisfy { $0 >= 45 }, "hits in each round: \(hitsInRound)")
    }
}

/// A seeded generator, so a failing sequence comes again.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
