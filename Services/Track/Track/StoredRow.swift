import Model
import TrackCore

/// The track service's row as it is stored (`BinaryStoredRow`): written with
/// every batch that touched the device and read again whenever a device
/// evicted from the cache sends a point. The row carries the live tail (up
/// to 120 vertices): as JSON that was 7 KB, read back through JSONDecoder at
/// most points of a large fleet. Version 2 added `retainedFrameCleared`;
/// a version 1 row reads with it false.
extension TrackRow: BinaryStoredRow {
    static let binaryVersion: UInt64 = 2
    static let oldestBinaryVersion: UInt64 = 1
    static let binaryName = "the track row"

    func writeFields(to w: inout BinaryWriter) {
        w.write(lastTimeMs, lastLatitude, lastLongitude, last, motion, tail, session, sessionStartOdometerM, retainedFrameCleared)
    }

    init(readingFieldsFrom r: inout BinaryReader) throws { try self.init(readingFieldsFrom: &r, version: Self.binaryVersion) }

    init(readingFieldsFrom r: inout BinaryReader, version: UInt64) throws {
        self.init(lastTimeMs: try r.read(), lastLatitude: try r.read(), lastLongitude: try r.read(), last: try r.read(),
                  motion: try r.read(), tail: try r.read(), session: try r.read(), sessionStartOdometerM: try r.read(),
                  retainedFrameCleared: version >= 2 ? try r.read() : false)
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
