import FilterCore
import Foundation
import Model
import Runtime
import TestSupport

/// `tracker-bench row-codec`: what storing one filter row costs (it is
/// written with every batch that touched its device, so with a large fleet
/// once per fix): its size and the time to encode and decode it, for each
/// way of storing it, on a row taken from the middle of a real drive. The
/// service stores `FilterRow.stored`, the binary form.
enum RowCodecBench {
    static func run() throws {
        let core = FilterCore(profile: .named(.balanced))
        let row = judged(try Fixtures.fixes("munich-drive.jsonl").prefix(300), core)
        let rounds = 2_000
        func measure(_ name: String, _ body: () throws -> Int) rethrows {
            var size = try body()
            let start = ContinuousClock.now
            for _ in 0..<rounds { size = try body() }
            let micros = (ContinuousClock.now - start).seconds / Double(rounds) * 1e6
            print(String(format: "  %-28@ %6d bytes  %7.1f µs", name as NSString, size, micros))
        }
        let plist = PropertyListEncoder()
        plist.outputFormat = .binary
        let json = try JSONEncoder().encode(row), binaryPlist = try plist.encode(row)
        print("one filter row (balanced profile, fix 300 of munich-drive):")
        try measure("encode JSONEncoder") { try JSONEncoder().encode(row).count }
        try measure("encode JSONStreamEncoder") { try JSONStreamEncoder.encode(row).count }
        try measure("encode binary plist") { try plist.encode(row).count }
        measure("encode FilterRow.stored") { row.stored.count }
        try measure("decode JSONDecoder") { _ = try JSONDecoder().decode(FilterRow.self, from: json); return json.count }
        try measure("decode binary plist") { _ = try PropertyListDecoder().decode(FilterRow.self, from: binaryPlist); return binaryPlist.count }
        let stored = Data(row.stored)
        try measure("decode FilterRow.restored") { _ = try FilterRow.restored(from: stored, using: JSONCoding.decoder); return stored.count }

        try inMemory(stored, "munich-drive, no Doppler")
        // A device with Doppler publishes at once: no smoothing lag in its row.
        try inMemory(Data(judged(try Fixtures.fixes("mtv-drive-truth.jsonl").dropFirst(700).prefix(300), core).stored), "mtv-drive with Doppler")
        try inMemory(Data(FilterRow().stored), "a device never judged")
    }

    /// The row of a device whose fixes these were, as the service keeps it.
    static func judged(_ fixes: some Sequence<DeviceFix>, _ core: FilterCore) -> FilterRow {
        var row = FilterRow()
        for (i, fix) in fixes.enumerated() {
            let raw = RawFix(device: DeviceID("d")!, seq: Int64(i + 1), sessionID: "s", timeMs: fix.timeMs, receivedMs: fix.timeMs,
                             source: .device, latitude: fix.lat, longitude: fix.lon, accuracyM: fix.acc, speedMps: fix.speed, courseDeg: fix.course)
            _ = core.handle(raw, row: &row, rejectionEvents: .all)
        }
        return row
    }

    /// What a device takes in the device cache, its row decoded, against
    /// what the cache counts for it (cachedDeviceCost): resident memory
    /// before and after holding 10,000 devices, so page rounding and malloc's
    /// slack count too.
    static func inMemory(_ stored: Data, _ name: String) throws {
        let devices = 10_000
        // Heap an earlier measurement freed would be reused unseen.
        Heap.trim()
        let before = ChildProcess.memory(of: getpid())?.resident ?? 0
        let cache = try deviceCacheHolding(devices, storedBytes: stored.count) {
            try FilterRow.restored(from: stored, using: JSONCoding.decoder).row
        }
        // What growing the cache freed (its outgrown arrays), handed back as a service does when idle.
        Heap.trim()
        let perDevice = Double((ChildProcess.memory(of: getpid())?.resident ?? 0) - before) / Double(devices)
        let counted = cachedDeviceCost(FilterRow.self, storedBytes: stored.count)
        print(String(format: "  in memory (%@, %d bytes stored, the row %d inline): %.0f bytes a cached device (%d held); the cache counts %d (%.2f of it)",
                     name as NSString, stored.count, MemoryLayout<FilterRow>.stride, perDevice, withExtendedLifetime(cache) { devices },
                     counted, Double(counted) / perDevice))
    }
}
