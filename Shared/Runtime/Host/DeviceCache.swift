import Model

/// What the device cache counts for one device's state of type `T`, stored
/// in `storedBytes` (see `DeviceCache.cost`); public for the benchmark that
/// checks it against the memory a decoded row really takes.
public func deviceStateCost<T>(_ type: T.Type, storedBytes: Int) -> Int { MemoryLayout<T>.stride + 2 * storedBytes + 512 }

/// A host's per-device state in memory, bounded by bytes and by count.
/// Entries load from the store on first use and are written back once per
/// batch. Past either bound, the least recently used clean entries are
/// dropped at the next commit until the cache is back under 80 % of both
/// (they load again when their device speaks): memory stays flat however
/// many devices there are, and state beyond the budget lives on disk.
///
/// An entry's size is an estimate from its stored form and its type's
/// inline size (`cost(storedBytes:)`), known when it is loaded and again
/// whenever it is written.
final class DeviceCache<Entry> {
    private var entries: [DeviceID: Slot] = [:]
    private(set) var dirty: Set<DeviceID> = []
    private var tick: UInt64 = 0
    /// Every use in order, oldest first, from `head` on: a device and the
    /// tick of that use. Only a device's newest use counts (its slot's
    /// `used`); older ones are skipped when met. A use costs an append, and
    /// eviction takes devices from the front, least recently used first,
    /// without sorting the cache: a fleet larger than the cache misses on
    /// every fix, so eviction runs at every commit.
    private var uses: [Use] = []
    private var head = 0
    let capacity: Int
    let budgetBytes: Int
    /// The estimated bytes of every cached entry.
    private(set) var bytes = 0

    private struct Slot {
        var entry: Entry
        var used: UInt64
        var bytes: Int
    }

    private struct Use {
        var device: DeviceID
        var tick: UInt64
    }

    init(capacity: Int, budgetBytes: Int = .max) {
        self.capacity = max(1, capacity)
        self.budgetBytes = max(1, budgetBytes)
    }

    /// Memory an entry takes, from the size of its stored form: decoded
    /// values are wider than their bytes (optionals, array headers), and the
    /// dictionary slot and device id come on top. The entry's inline size
    /// counts whatever its stored form: a binary row leaves out its absent
    /// fields, which take their room in memory all the same.
    static func cost(storedBytes: Int) -> Int { deviceStateCost(Entry.self, storedBytes: storedBytes) }

    var count: Int { entries.count }
    /// Uses still listed, outdated ones included (for tests: the list stays bounded).
    var listedUses: Int { uses.count - head }

    func get(_ device: DeviceID) -> Entry? {
        guard let i = entries.index(forKey: device) else { return nil }
        let tick = use(device)
        entries.values[i].used = tick
        return entries.values[i].entry
    }

    /// Caches an entry as loaded from the store (`storedBytes` long there).
    func insertClean(_ device: DeviceID, _ entry: Entry, storedBytes: Int) {
        let cost = Self.cost(storedBytes: storedBytes), tick = use(device)
        bytes += cost - (entries[device]?.bytes ?? 0)
        entries[device] = Slot(entry: entry, used: tick, bytes: cost)
    }

    /// Changes a cached entry in place; it is written at the next commit.
    func modify(_ device: DeviceID, _ body: (inout Entry) -> Void) {
        guard let i = entries.index(forKey: device) else { return }
        body(&entries.values[i].entry)
        dirty.insert(device)
    }

    /// Writes each changed entry, read in place, with `write`, which
    /// returns how many bytes it took in the store: its size from then on.
    func writeDirty(_ write: (DeviceID, Entry) throws -> Int) rethrows {
        for device in dirty {
            guard let i = entries.index(forKey: device) else { continue }
            let cost = Self.cost(storedBytes: try write(device, entries.values[i].entry))
            bytes += cost - entries.values[i].bytes
            entries.values[i].bytes = cost
        }
    }

    /// The batch that wrote them committed.
    func markClean() { dirty.removeAll(keepingCapacity: true) }

    /// A failed batch: changed entries no longer match the store; forget them.
    func discardDirty() {
        for device in dirty { remove(device) }
        dirty.removeAll()
    }

    /// Drops the least recently used clean entries once over either bound,
    /// until back under 80 % of both.
    func evictIfNeeded() {
        guard entries.count > capacity || bytes > budgetBytes else { return }
        let keepCount = capacity - capacity / 5, keepBytes = budgetBytes - budgetBytes / 5
        var kept: [Use] = []
        while entries.count > keepCount || bytes > keepBytes, head < uses.count {
            let oldest = uses[head]
            head += 1
            guard entries[oldest.device]?.used == oldest.tick else { continue }
            if dirty.contains(oldest.device) { kept.append(oldest); continue }
            remove(oldest.device)
        }
        // Changed entries stay, as old as they were.
        head -= kept.count
        uses.replaceSubrange(head..<(head + kept.count), with: kept)
        dropUsedUp()
    }

    /// A new use of `device`: its tick.
    private func use(_ device: DeviceID) -> UInt64 {
        // Outdated uses pile up while the cache is under its bounds: cleared
        // once they outnumber the entries, so the list stays within a few times the cache.
        if uses.count - head >= 2 * entries.count + 1_024 {
            uses = uses[head...].filter { entries[$0.device]?.used == $0.tick }
            head = 0
        }
        tick &+= 1
        uses.append(Use(device: device, tick: tick))
        return tick
    }

    /// Forgets the uses before `head` once they are half the list.
    private func dropUsedUp() {
        guard head > 1_024, head * 2 > uses.count else { return }
        uses.removeFirst(head)
        head = 0
    }

    private func remove(_ device: DeviceID) {
        if let slot = entries.removeValue(forKey: device) { bytes -= slot.bytes }
    }
}
