import Foundation
import Model
import MotionCore
import Runtime

/// The motion service's row as it is stored: a compact binary form
/// (`BinaryCoding`), written with every batch that touched the device and
/// read again whenever a device evicted from the cache sends a point. Through
/// the JSON encoder its writing was a quarter of motion's time at 10,000
/// devices. Rows saved as JSON by earlier releases still read and are written
/// back in this form.
///
/// Layout: the magic byte, the format version, then the fields in order. A
/// field added later goes at the end, with the version raised and a reader
/// for the old order.
extension MotionDeviceRow {
    /// First byte of the binary form; a JSON row starts with `{`.
    static let binaryMagic: UInt8 = 0xF1
    static let binaryVersion: UInt64 = 1

    var stored: [UInt8] {
        var w = BinaryWriter(capacity: 512)
        w.byte(Self.binaryMagic)
        w.varint(Self.binaryVersion)
        w.write(motion, visits, route, openSession, closedSession, clockMs, clockWallMs, lastHeartbeatMs)
        w.write(announcedActivity, announcedActivityWallMs, motionSeq, timerWallMs)
        return w.written
    }

    /// A stored row, binary or JSON (earlier releases).
    static func restored(from data: Data, using decoder: JSONDecoder) throws -> MotionDeviceRow {
        guard data.first == binaryMagic else { return try decoder.decode(MotionDeviceRow.self, from: data) }
        var r = BinaryReader(Array(data), from: 1)
        let version = try r.varint()
        guard version == binaryVersion else { throw BinaryReader.Malformed("motion row version \(version) is newer than this release") }
        let row = MotionDeviceRow(motion: try r.read(), visits: try r.read(), route: try r.read(), openSession: try r.read(),
                                  closedSession: try r.read(), clockMs: try r.read(), clockWallMs: try r.read(),
                                  lastHeartbeatMs: try r.read(), announcedActivity: try r.read(), announcedActivityWallMs: try r.read(),
                                  motionSeq: try r.read(), timerWallMs: try r.read())
        guard r.isAtEnd else { throw BinaryReader.Malformed("the motion row has bytes left after it") }
        return row
    }

    static var codec: RowCodec<MotionDeviceRow> {
        RowCodec(fresh: { MotionDeviceRow() }, encode: { $0.stored },
                 decode: { (try MotionDeviceRow.restored(from: $0, using: JSONCoding.decoder), nil) }, binary: true)
    }
}
