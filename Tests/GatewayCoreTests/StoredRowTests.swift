import Foundation
import GatewayCore
import Model
import Testing

/// The gateway's row in its binary form: every field back as written, the
/// JSON of earlier releases still read, and damage thrown, never trapped on.
@Suite struct GatewayStoredRowTests {
    let open = Session(id: "s-1", device: DeviceID("jane.phone")!, tag: "route 7", startMs: 1_700_000_000_000, endMs: nil, auto: true)

    @Test(arguments: [
        GatewayRow(),
        GatewayRow(lastSeq: 41, sessions: DeviceSessions(current: nil, lastFixMs: -5, lastReceivedMs: nil)),
        GatewayRow(lastSeq: 1 << 40, sessions: DeviceSessions(
            current: Session(id: "s-1", device: DeviceID("jane.phone")!, tag: "route 7", startMs: 1_700_000_000_000, endMs: 1_700_000_900_000, auto: false),
            lastFixMs: 1_700_000_899_000, lastReceivedMs: 1_700_000_900_100)),
    ])
    func everyFieldComesBack(_ row: GatewayRow) throws {
        let stored = row.stored
        #expect(stored.first == 0xF1)
        #expect(try GatewayRow.restored(from: Data(stored), using: JSONDecoder()) == row)
    }

    @Test func aRowOfAnEarlierReleaseStillReads() throws {
        let row = GatewayRow(lastSeq: 7, sessions: DeviceSessions(current: open, lastFixMs: 1_700_000_001_000, lastReceivedMs: 1_700_000_001_500))
        let json = try JSONEncoder().encode(row)
        #expect(try GatewayRow.restored(from: json, using: JSONDecoder()) == row)
    }

    @Test func damageIsThrown() throws {
        let stored = GatewayRow(lastSeq: 3, sessions: DeviceSessions(current: open)).stored
        #expect(throws: (any Error).self) { try GatewayRow.restored(from: Data(stored.dropLast(3)), using: JSONDecoder()) }
        #expect(throws: (any Error).self) { try GatewayRow.restored(from: Data(stored + [0]), using: JSONDecoder()) }
        // A version this release does not know.
        #expect(throws: (any Error).self) { try GatewayRow.restored(from: Data([0xF1, 9]) + Data(stored.dropFirst(2)), using: JSONDecoder()) }
    }
}
