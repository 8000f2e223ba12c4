import Model
@testable import Runtime
import Testing

/// The device cache drops the least recently used clean entries, in the
/// order of their last use, and keeps what a batch changed.
struct DeviceCacheTests {
    func device(_ n: Int) -> DeviceID { DeviceID("d\(n)")! }

    func cache(capacity: Int, holding n: Int) -> DeviceCache<Int> {
        let cache = DeviceCache<Int>(capacity: capacity)
        for i in 0..<n { cache.insertClean(device(i), i, storedBytes: 10) }
        return cache
    }

    func held(_ cache: DeviceCache<Int>, _ range: Range<Int>) -> [Int] { range.filter { cache.get(device($0)) != nil } }

    @Test func evictsTheLeastRecentlyUsedFirst() {
        let cache = cache(capacity: 5, holding: 5)
        _ = cache.get(device(0))
        cache.insertClean(device(5), 5, storedBytes: 10)
        cache.insertClean(device(6), 6, storedBytes: 10)
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
        for i in 0..<6 { again.insertClean(device(i), i, storedBytes: 10) }
        again.modify(device(0)) { $0 += 1 }
        again.evictIfNeeded()
        again.markClean()
        again.insertClean(device(6), 6, storedBytes: 10)
        again.insertClean(device(7), 7, storedBytes: 10)
        again.evictIfNeeded()
        #expect(held(again, 0..<8) == [4, 5, 6, 7])
    }

    @Test func evictsByBytesInUseOrder() {
        let cache = DeviceCache<Int>(capacity: 1_000, budgetBytes: 5 * DeviceCache<Int>.cost(storedBytes: 10))
        for i in 0..<6 { cache.insertClean(device(i), i, storedBytes: 10) }
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
        for i in 3..<13 { cache.insertClean(device(i), i, storedBytes: 10) }
        cache.evictIfNeeded()
        #expect(held(cache, 0..<13) == Array(5..<13))
    }

    @Test func theUseThatClearsTheListCounts() {
        let cache = cache(capacity: 10, holding: 3)
        // Three inserts and 1,028 uses: the last use, of d1, clears the list.
        for k in 0..<1_028 { _ = cache.get(device(k % 3)) }
        #expect(cache.listedUses <= 4)
        for i in 3..<13 { cache.insertClean(device(i), i, storedBytes: 10) }
        cache.evictIfNeeded()
        // d2, d0 and d1 were used before the ten new devices: all three go, then d3 and d4.
        #expect(held(cache, 0..<13) == Array(5..<13))
    }

    @Test func aDiscardedEntryLoadsAgainAsNew() {
        let cache = cache(capacity: 5, holding: 5)
        cache.modify(device(1)) { $0 += 100 }
        cache.discardDirty()
        #expect(cache.get(device(1)) == nil)
        cache.insertClean(device(1), 1, storedBytes: 10)
        cache.insertClean(device(5), 5, storedBytes: 10)
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
        for i in 10..<13 { cache.insertClean(device(i), i, storedBytes: 10) }
        cache.evictIfNeeded()
        cache.modify(device(12)) { $0 += 100 }
        cache.discardDirty()
        let held = held(cache, 0..<13)
        #expect(held == [0, 2, 4, 6, 8, 10, 11])
        for i in held { #expect(cache.get(device(i)) == i) }
        #expect(cache.bytes == held.count * DeviceCache<Int>.cost(storedBytes: 10))
    }
}
