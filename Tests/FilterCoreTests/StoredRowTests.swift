import FilterCore
import Foundation
import Model
import TestSupport
import Testing

/// The filter's row is stored with every batch that touched its device, by
/// `JSONStreamEncoder`. Along whole drives, in every profile, each state it
/// goes through reads back as the same state, and as the same JSON that
/// JSONEncoder writes.
@Suite struct StoredRowTests {
    @Test(arguments: ["munich-drive.jsonl", "pixel6-walk.jsonl"], FilterProfile.Name.allCases)
    func everyStateAlongADriveReadsBack(_ recording: String, _ profile: FilterProfile.Name) throws {
        let core = FilterCore(profile: .named(profile))
        var row = FilterRow()
        var checked = 0
        for (i, fix) in try Fixtures.fixes(recording).enumerated() {
            let raw = RawFix(device: DeviceID("d")!, seq: Int64(i + 1), sessionID: "s", timeMs: Int64(fix.t * 1000), receivedMs: Int64(fix.t * 1000),
                             source: .device, latitude: fix.lat, longitude: fix.lon, accuracyM: fix.acc, speedMps: fix.speed,
                             courseDeg: fix.course, altitudeM: fix.alt)
            _ = core.handle(raw, row: &row, rejectionEvents: .all)
            row.arrivedMs = Int64(i)
            // Every state early on (the filter starting, held fixes), then a sample.
            guard i < 40 || i % 25 == 0 else { continue }
            let stored = JSONCoding.stored(row)
            let read = try FilterRow.restored(from: Data(stored), using: JSONCoding.decoder)
            #expect(!read.restarted)
            #expect(read.row == row, "fix \(i)")
            let asJSON = try JSONCoding.decoder.decode(JSONValue.self, from: Data(stored))
            #expect(asJSON == (try JSONCoding.decoder.decode(JSONValue.self, from: JSONCoding.foundation(row))), "fix \(i)")
            checked += 1
        }
        #expect(checked >= 40)
    }
}
