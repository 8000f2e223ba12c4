import Model

/// What the device cache counts for a device whose state, of type `Row`, is
/// `storedBytes` long in its stored form (see `DeviceCache.cost`); public
/// for the benchmark that checks it against what a cached device takes.
public func cachedDeviceCost<Row>(_ row: Row.Type, storedBytes: Int) -> Int {
    DeviceCache<DeviceEntry<Row>>.cost(storedBytes: storedBytes)
}

/// For that benchmark: a device cache holding `devices` devices, each with
/// the row `decode` returns (decoded anew for each, as loaded), counted as
/// `storedBytes` long. Keep what it returns to keep them.
public func deviceCacheHolding<Row>(_ devices: Int, storedBytes: Int, decode: () throws -> Row) rethrows -> AnyObject {
    let cache = DeviceCache<DeviceEntry<Row>>(capacity: devices)
    for i in 0..<devices {
        cache.insertClean(DeviceID("device-\(i)")!, DeviceEntry(row: try decode(), inputs: [:], ackedThrough: 0), storedBytes: storedBytes)
    }
    return cache
}

/// A host's per-device state in memory, bounded by bytes and by count.
/// Entries load from the store on first use and are written back once per
/// batch. Past either bound, clean entries are dropped at the next commit
/// until the cache is back under 80 % of both (`evictIfNeeded`; they load
/// again when their device speaks): memory stays flat however many devices
/// there are, and state beyond the budget lives on disk.
///
/// A fleet speaks in turn, so what the budget holds decides what misses.
/// An entry is counted close to what it takes (`cost`): each lies in a box
/// of its own, listed in one array and found through a small index. Kept
/// inline, in a dictionary each entry's size took the table's spare buckets
/// too (about 1.6 times it with 10,000 devices), and in an array its spare
/// capacity (a filter row alone is 648 bytes inline: with 10,000 devices
/// the array held 5.6 MB for about 5,800 entries, some 1.7 MB the budget
/// did not count).
/// What eviction reads of each device (`Slot`) lies in an array of its own
/// beside them: read through the entry's generic type, each look copied
/// the whole entry, retains and all (a track's pass over 10,000 devices
/// took 40 ms of one commit).
final class DeviceCache<Entry> {
    /// Where each cached device's slot and entry are in `slots` and `entries`.
    private var index: [DeviceID: Int] = [:]
    private var slots: [Slot] = []
    private var entries: [Box] = []
    /// Slots not used again since they loaded (`reused` false): the newest-loaded pass looks for no more.
    private var loadedOnly = 0
    private(set) var dirty: Set<DeviceID> = []
    private var tick: UInt64 = 0
    /// Batches committed.
    private var batches: UInt64 = 0
    /// The longest gap between a device's uses seen lately (in different
    /// batches), halved once four times as many uses passed without one as
    /// long: about a round of the fleet. How long a device loaded once may
    /// wait for its next message before it counts as silent (for ever, until
    /// a device was used again).
    private var round: UInt64 = 0
    /// When `round` was last set.
    private var roundSetAt: UInt64 = 0
    /// Every use in order, oldest first, from `head` on: a device and the
    /// tick of that use. Only a device's newest use counts (its slot's
    /// `used`); older ones are skipped when met. A use costs an append, and
    /// eviction takes devices from the front, least recently used first, or
    /// from the back (devices loaded and not used again), without sorting
    /// the cache (with a fleet larger than the cache it runs every few commits).
    private var uses: [Use] = []
    private var head = 0
    let capacity: Int
    let budgetBytes: Int
    /// The estimated bytes of every cached entry.
    private(set) var bytes = 0

    private struct Slot {
        let device: DeviceID
        var used: UInt64
        var bytes: Int
        /// The batch of its last use.
        var usedIn: UInt64
        /// How many uses apart its device speaks: the newest gap between two
        /// of its uses in different batches, or half the one before when that
        /// was longer (so a burst does not make a device that speaks once a
        /// round look like one that speaks all the time). Zero until then.
        var gap: UInt64 = 0
        /// Used again in a later batch than the one that loaded it (a device
        /// sending two fixes at once has not spoken again).
        var reused: Bool { gap > 0 }
    }

    private struct Use {
        var device: DeviceID
        var tick: UInt64
    }

    private final class Box {
        var entry: Entry
        init(_ entry: Entry) { self.entry = entry }
    }

    init(capacity: Int, budgetBytes: Int = .max) {
        self.capacity = max(1, capacity)
        self.budgetBytes = max(1, budgetBytes)
    }

    /// Memory an entry takes, from the size of its stored form: its slot,
    /// its box (the entry's inline size, the object's header and its place
    /// in the list of boxes), its index entry and its places in the list
    /// of uses (up to three, and the index keeps its largest size), and what
    /// its decoded values hold on the heap. Measured on filter rows
    /// (`tracker-bench row-codec`): about 400 heap bytes up to a few hundred stored ones (small arrays,
    /// most fields inline), then about 1.6 times the stored bytes at 3.7 KB
    /// (long arrays of doubles are wider decoded than stored); counted as
    /// twice the stored bytes less 1 KB.
    static func cost(storedBytes: Int) -> Int {
        // A box is its object's header (16 bytes) and its entry, and a reference in the list of boxes.
        MemoryLayout<Slot>.stride + MemoryLayout<Box>.stride + 16 + MemoryLayout<Entry>.stride + 128 + max(416, 2 * storedBytes - 1_024)
    }

    var count: Int { slots.count }
    /// For tests: the count of entries not used again since they loaded, as kept and as recounted.
    var loadedOnlyCounts: (kept: Int, recounted: Int) { (loadedOnly, slots.count(where: { !$0.reused })) }
    /// Uses still listed, outdated ones included (for tests: the list stays bounded).
    var listedUses: Int { uses.count - head }

    func get(_ device: DeviceID) -> Entry? {
        guard let i = index[device] else { return nil }
        let tick = use(device)
        // Uses within one batch are one message's worth: no gap, no reuse.
        if slots[i].usedIn != batches {
            let gap = tick - slots[i].used
            if !slots[i].reused { loadedOnly -= 1 }
            slots[i].gap = max(gap, slots[i].gap / 2)
            if gap >= round { (round, roundSetAt) = (gap, tick) }
            slots[i].usedIn = batches
        }
        slots[i].used = tick
        return entries[i].entry
    }

    /// Caches an entry as loaded from the store (`storedBytes` long there).
    func insertClean(_ device: DeviceID, _ entry: Entry, storedBytes: Int) {
        let slot = Slot(device: device, used: use(device), bytes: Self.cost(storedBytes: storedBytes), usedIn: batches)
        bytes += slot.bytes
        loadedOnly += 1
        if let i = index[device] {
            bytes -= slots[i].bytes
            if !slots[i].reused { loadedOnly -= 1 }
            slots[i] = slot
            entries[i] = Box(entry)
        } else {
            index[device] = slots.count
            slots.append(slot)
            entries.append(Box(entry))
        }
    }

    /// Changes a cached entry in place; it is written at the next commit.
    func modify(_ device: DeviceID, _ body: (inout Entry) -> Void) {
        guard let i = index[device] else { return }
        body(&entries[i].entry)
        dirty.insert(device)
    }

    /// Writes each changed entry, read in place, with `write`, which
    /// returns how many bytes it took in the store: its size from then on.
    func writeDirty(_ write: (DeviceID, Entry) throws -> Int) rethrows {
        for device in dirty {
            guard let i = index[device] else { continue }
            let cost = Self.cost(storedBytes: try write(device, entries[i].entry))
            bytes += cost - slots[i].bytes
            slots[i].bytes = cost
        }
    }

    /// The batch that wrote them committed.
    func markClean() {
        dirty.removeAll(keepingCapacity: true)
        batches += 1
    }

    /// A failed batch: changed entries no longer match the store; forget them.
    func discardDirty() {
        // Not a batch that ended: its messages come again, and a device
        // they load again has not spoken again.
        for device in dirty { remove(device) }
        dirty.removeAll()
    }

    /// Once over either bound, drops clean entries until back under 80 %
    /// of both, in three passes: those whose device has been silent for four
    /// times as many uses as it usually speaks (a device loaded once: as the
    /// devices used again lately spoke), and as the cache has entries, least
    /// recently used first; those not used again (in a later
    /// batch) since they loaded, most recently used first; then, if still
    /// over, the least recently used of the rest.
    ///
    /// Why not least recently used alone: a fleet speaks in turn, so a cache
    /// smaller than the fleet would drop each device just before it speaks
    /// again and miss on every message. Dropping what it loaded last
    /// instead, it keeps a steady part of the fleet (80 % of the cache),
    /// which hits every round.
    func evictIfNeeded() {
        guard slots.count > capacity || bytes > budgetBytes else { return }
        if round > 0, tick - roundSetAt > 4 * round { (round, roundSetAt) = (round / 2, tick) }
        // Silent: four times its gap, and four times the cache's size, without a use.
        let cached = UInt64(slots.count)
        evictOldestFirst(before: tick > 4 * cached ? tick - 4 * cached : 0) { [tick, round] slot in
            // A device loaded once has no gap of its own yet: the fleet's round
            // stands for it, once known (before, it waits for the next pass).
            let gap = slot.reused ? slot.gap : (round > 0 ? round : .max / 8)
            return tick - slot.used > 4 * max(gap, cached)
        }
        evictNewestLoadedFirst()
        evictOldestFirst(before: .max) { _ in true }
        dropUsedUp()
    }

    private var overTarget: Bool {
        slots.count > capacity - capacity / 5 || bytes > budgetBytes - budgetBytes / 5
    }

    /// Drops the entries `drop` names, from the least recently used on,
    /// among those last used before the tick `before`; the others stay, as
    /// old as they were, and so do changed ones.
    private func evictOldestFirst(before: UInt64, dropping drop: (Slot) -> Bool) {
        var kept: [Use] = []
        while overTarget, head < uses.count, uses[head].tick < before {
            let oldest = uses[head]
            head += 1
            guard let i = index[oldest.device], slots[i].used == oldest.tick else { continue }
            if dirty.contains(oldest.device) || !drop(slots[i]) { kept.append(oldest); continue }
            remove(oldest.device)
        }
        head -= kept.count
        uses.replaceSubrange(head..<(head + kept.count), with: kept)
    }

    /// Drops the clean entries not used again since they loaded, from the
    /// most recently used back (their uses stay listed, outdated, until the
    /// list is next cleared).
    private func evictNewestLoadedFirst() {
        var i = uses.count, unseen = loadedOnly
        while overTarget, unseen > 0, i > head {
            i -= 1
            let use = uses[i]
            guard let at = index[use.device], slots[at].used == use.tick, !slots[at].reused else { continue }
            unseen -= 1
            if !dirty.contains(use.device) { remove(use.device) }
        }
    }

    /// A new use of `device`: its tick.
    private func use(_ device: DeviceID) -> UInt64 {
        // Outdated uses pile up (a device's earlier uses, and those of devices
        // dropped newest first): cleared once they outnumber the slots, so
        // the list stays within a few times the cache.
        if uses.count - head >= 2 * slots.count + 1_024 {
            uses = uses[head...].filter(isNewest)
            head = 0
        }
        tick += 1
        uses.append(Use(device: device, tick: tick))
        return tick
    }

    /// Forgets the uses before `head` once they are half the list.
    private func dropUsedUp() {
        guard head > 1_024, head * 2 > uses.count else { return }
        uses.removeFirst(head)
        head = 0
    }

    /// Whether `use` is its device's newest (older ones are skipped).
    private func isNewest(_ use: Use) -> Bool { index[use.device].map { slots[$0].used == use.tick } ?? false }

    /// Removes a device's slot; the last slot takes its place.
    private func remove(_ device: DeviceID) {
        guard let i = index.removeValue(forKey: device) else { return }
        bytes -= slots[i].bytes
        if !slots[i].reused { loadedOnly -= 1 }
        let last = slots.removeLast(), lastEntry = entries.removeLast()
        if i < slots.count {
            slots[i] = last
            entries[i] = lastEntry
            index[last.device] = i
        }
    }
}
