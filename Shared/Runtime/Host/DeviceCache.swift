import Model

/// A host's per-device state in memory, bounded. Entries load from the store
/// on first use and are written back once per batch; past `capacity` the
/// least recently used tenth of the clean entries is dropped at the next
/// commit (they load again when their device speaks), so memory stays flat
/// however many devices there are.
final class DeviceCache<Entry> {
    private var entries: [DeviceID: Slot] = [:]
    private(set) var dirty: Set<DeviceID> = []
    private var tick: UInt64 = 0
    let capacity: Int

    private struct Slot {
        var entry: Entry
        var used: UInt64
    }

    init(capacity: Int) { self.capacity = max(1, capacity) }

    var count: Int { entries.count }

    func get(_ device: DeviceID) -> Entry? {
        tick &+= 1
        entries[device]?.used = tick
        return entries[device]?.entry
    }

    /// Caches an entry as loaded from the store.
    func insertClean(_ device: DeviceID, _ entry: Entry) {
        tick &+= 1
        entries[device] = Slot(entry: entry, used: tick)
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

    /// The batch that wrote them committed.
    func markClean() { dirty.removeAll(keepingCapacity: true) }

    /// A failed batch: changed entries no longer match the store; forget them.
    func discardDirty() {
        for device in dirty { entries[device] = nil }
        dirty.removeAll()
    }

    /// Drops the least recently used clean entries once over capacity.
    func evictIfNeeded() {
        guard entries.count > capacity else { return }
        let excess = entries.count - capacity + capacity / 10
        let victims = entries.filter { !dirty.contains($0.key) }.sorted { $0.value.used < $1.value.used }.prefix(excess)
        for (device, _) in victims { entries[device] = nil }
    }
}
