import FoundationEssentials
import Model

/// The gateway's row as it is stored (`BinaryStoredRow`): written with every
/// batch that touched the device and read again whenever a device evicted
/// from the cache speaks (with a large fleet, at most of its fixes). Through
/// JSONDecoder that read was an eighth of the gateway's time at 10,000 devices.
extension GatewayRow: BinaryStoredRow {
    public static let binaryVersion: UInt64 = 1
    public static let binaryName = "the gateway row"

    public func writeFields(to w: inout BinaryWriter) {
        w.write(lastSeq, sessions.current, sessions.lastFixMs, sessions.lastReceivedMs)
    }

    public init(readingFieldsFrom r: inout BinaryReader) throws {
        self.init(lastSeq: try r.read(), sessions: DeviceSessions(current: try r.read(), lastFixMs: try r.read(), lastReceivedMs: try r.read()))
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
