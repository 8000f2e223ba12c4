import Foundation
import Model

/// The gateway's row as it is stored: a compact binary form (`BinaryCoding`),
/// written with every batch that touched the device and read again whenever
/// a device evicted from the cache speaks (with a large fleet, at most of its
/// fixes). Through JSONDecoder that read was an eighth of the gateway's time
/// at 10,000 devices. Rows saved as JSON by earlier releases still read and
/// are written back in this form.
///
/// Layout: the magic byte, the format version, then the fields in order. A
/// field added later goes at the end, with the version raised and a reader
/// for the old order.
extension GatewayRow {
    /// First byte of the binary form; a JSON row starts with `{`.
    static let binaryMagic: UInt8 = 0xF1
    static let binaryVersion: UInt64 = 1

    public var stored: [UInt8] {
        var w = BinaryWriter(capacity: 128)
        w.byte(Self.binaryMagic)
        w.varint(Self.binaryVersion)
        w.write(lastSeq, sessions.current, sessions.lastFixMs, sessions.lastReceivedMs)
        return w.written
    }

    /// A stored row, binary or JSON (earlier releases).
    public static func restored(from data: Data, using decoder: JSONDecoder) throws -> GatewayRow {
        guard data.first == binaryMagic else { return try decoder.decode(GatewayRow.self, from: data) }
        var r = BinaryReader(Array(data), from: 1)
        let version = try r.varint()
        guard version == binaryVersion else { throw BinaryReader.Malformed("gateway row version \(version) is newer than this release") }
        let row = GatewayRow(lastSeq: try r.read(),
                             sessions: DeviceSessions(current: try r.read(), lastFixMs: try r.read(), lastReceivedMs: try r.read()))
        guard r.isAtEnd else { throw BinaryReader.Malformed("the gateway row has bytes left after it") }
        return row
    }
}

extension Session: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(id, device.rawValue, tag, startMs, endMs, auto) }
    public init(from r: inout BinaryReader) throws {
        let id: String = try r.read(), raw: String = try r.read()
        guard let device = DeviceID(allowingReserved: raw) else { throw BinaryReader.Malformed("'\(raw)' is not a device id") }
        self.init(id: id, device: device, tag: try r.read(), startMs: try r.read(), endMs: try r.read(), auto: try r.read())
    }
}
