import Model

/// The input watermarks committed lately, so a producer's tips for devices
/// that were just written are checked without reading their rows back: at
/// 10,000 devices every health's thousand tips evicted and reloaded a
/// thousand rows in each consumer. Two generations bound it: the newer fills
/// up, then replaces the older. A mark missing here is read from the store.
struct RecentMarks {
    private var newer: [StreamRepairs.Key: InputMark] = [:]
    private var older: [StreamRepairs.Key: InputMark] = [:]
    /// Marks per generation.
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Call only with committed marks: a rolled-back batch must not vouch for a tip.
    mutating func record(_ device: DeviceID, _ marks: [String: InputMark]) {
        for (input, mark) in marks {
            if newer.count >= capacity {
                older = newer
                newer = Dictionary(minimumCapacity: capacity)
            }
            newer[StreamRepairs.Key(device: device, input: input)] = mark
        }
    }

    subscript(key: StreamRepairs.Key) -> InputMark? { newer[key] ?? older[key] }

    var count: Int { newer.count + older.count }
}
