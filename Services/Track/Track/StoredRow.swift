import Foundation
import Model
import Runtime
import TrackCore

/// The track service's row as it is stored: a compact binary form
/// (`BinaryCoding`), written with every batch that touched the device and
/// read again whenever a device evicted from the cache sends a point. The
/// row carries the live tail (up to 120 vertices): as JSON that was 7 KB,
/// read back through JSONDecoder at most points of a large fleet. Rows saved
/// as JSON by earlier releases still read and are written back in this form.
///
/// Layout: the magic byte, the format version, then the fields in order. A
/// field added later goes at the end, with the version raised and a reader
/// for the old order.
extension TrackRow {
    /// First byte of the binary form; a JSON row starts with `{`.
    static let binaryMagic: UInt8 = 0xF1
    static let binaryVersion: UInt64 = 1

    var stored: [UInt8] {
        var w = BinaryWriter(capacity: 64 + 24 * tail.count)
        w.byte(Self.binaryMagic)
        w.varint(Self.binaryVersion)
        w.write(lastTimeMs, lastLatitude, lastLongitude, last, motion, tail, session, sessionStartOdometerM)
        return w.written
    }

    /// A stored row, binary or JSON (earlier releases).
    static func restored(from data: Data, using decoder: JSONDecoder) throws -> TrackRow {
        guard data.first == binaryMagic else { return try decoder.decode(TrackRow.self, from: data) }
        var r = BinaryReader(Array(data), from: 1)
        let version = try r.varint()
        guard version == binaryVersion else { throw BinaryReader.Malformed("track row version \(version) is newer than this release") }
        let row = TrackRow(lastTimeMs: try r.read(), lastLatitude: try r.read(), lastLongitude: try r.read(), last: try r.read(),
                           motion: try r.read(), tail: try r.read(), session: try r.read(), sessionStartOdometerM: try r.read())
        guard r.isAtEnd else { throw BinaryReader.Malformed("the track row has bytes left after it") }
        return row
    }

    static var codec: RowCodec<TrackRow> {
        RowCodec(fresh: { TrackRow() }, encode: { $0.stored },
                 decode: { (try TrackRow.restored(from: $0, using: JSONCoding.decoder), nil) }, binary: true)
    }
}

extension Vertex: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(latitude, longitude, timeMs) }
    public init(from r: inout BinaryReader) throws { self.init(latitude: try r.read(), longitude: try r.read(), timeMs: try r.read()) }
}

extension LiveSession: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(id, startMs, distanceM, durationSec, points, maxSpeedMps) }
    public init(from r: inout BinaryReader) throws {
        self.init(id: try r.read(), startMs: try r.read(), distanceM: try r.read(), durationSec: try r.read(), points: try r.read(),
                  maxSpeedMps: try r.read())
    }
}
