import Model

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
/// What the device cache counts for one device's state of type `T`, stored
/// in `storedBytes` (see `DeviceCache.cost`); public for the benchmark that
/// checks it against the memory a decoded row really takes.
public func deviceStateCost<T>(_ type: T.Type, storedBytes: Int) -> Int { MemoryLayout<T>.stride + 2 * storedBytes + 512 }

final class DeviceCache<Entry> {
    private var entries: [DeviceID: Slot] = [:]
    private(set) var dirty: Set<DeviceID> = []
    private var tick: UInt64 = 0
    let capacity: Int
    let budgetBytes: Int
    /// The estimated bytes of every cached entry.
    private(set) var bytes = 0

    private struct Slot {
        var entry: Entry
        var used: UInt64
        var bytes: Int
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

    func get(_ device: DeviceID) -> Entry? {
        tick &+= 1
        entries[device]?.used = tick
        return entries[device]?.entry
    }

    /// Caches an entry as loaded from the store (`storedBytes` long there).
    func insertClean(_ device: DeviceID, _ entry: Entry, storedBytes: Int) {
        tick &+= 1
        let cost = Self.cost(storedBytes: storedBytes)
        bytes += cost - (entries[device]?.bytes ?? 0)
        entries[device] = Slot(entry: entry, used: tick, bytes: cost)
    }

    /// Changes a cached entry in place; it is written at the next commit.
    func modify(_ device: DeviceID, _ body: (inout Entry) -> Void) {
        guard entries[device] != nil else { return }
        body(&entries[device]!.entry)
        dirty.insert(device)
    }

    /// The changed entries, for writing.
    var dirtyEntries: [(DeviceID, Entry)] {
        dirty.compactMap { device in entries[device].map { (device, $0.entry) } }
    }

    /// An entry was written, `storedBytes` long.
    func written(_ device: DeviceID, storedBytes: Int) {
        guard let old = entries[device]?.bytes else { return }
        let cost = Self.cost(storedBytes: storedBytes)
        bytes += cost - old
        entries[device]!.bytes = cost
    }

    /// The batch that wrote them committed.
    func markClean() { dirty.removeAll(keepingCapacity: true) }

    /// A failed batch: changed entries no longer match the store; forget them.
    func discardDirty() {
        for device in dirty { remove(device) }
        dirty.removeAll()
    }

    /// Drops the least recently used clean entries once over either bound.
    func evictIfNeeded() {
        guard entries.count > capacity || bytes > budgetBytes else { return }
        let keepCount = capacity - capacity / 5, keepBytes = budgetBytes - budgetBytes / 5
        // Ages and ids only: sorting the slots themselves copied every entry (a filter row each).
        var byAge: [(used: UInt64, device: DeviceID)] = []
        byAge.reserveCapacity(entries.count)
        for (device, slot) in entries where !dirty.contains(device) { byAge.append((slot.used, device)) }
        byAge.sort { $0.used < $1.used }
        for (_, device) in byAge {
            guard entries.count > keepCount || bytes > keepBytes else { break }
            remove(device)
        }
    }

    private func remove(_ device: DeviceID) {
        if let slot = entries.removeValue(forKey: device) { bytes -= slot.bytes }
    }
}
