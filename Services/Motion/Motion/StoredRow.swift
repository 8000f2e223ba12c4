import Model
import MotionCore

/// The motion service's row as it is stored (`BinaryStoredRow`): written
/// with every batch that touched the device and read again whenever a device
/// evicted from the cache sends a point. Through the JSON encoder its writing
/// was a quarter of motion's time at 10,000 devices.
extension MotionDeviceRow: BinaryStoredRow {
    static let binaryVersion: UInt64 = 1
    static let binaryName = "the motion row"

    func writeFields(to w: inout BinaryWriter) {
        w.write(motion, visits, route, openSession, closedSession, clockMs, clockWallMs, lastHeartbeatMs)
        w.write(announcedActivity, announcedActivityWallMs, motionSeq, timerWallMs)
    }

    init(readingFieldsFrom r: inout BinaryReader) throws {
        self.init(motion: try r.read(), visits: try r.read(), route: try r.read(), openSession: try r.read(),
                  closedSession: try r.read(), clockMs: try r.read(), clockWallMs: try r.read(), lastHeartbeatMs: try r.read(),
                  announcedActivity: try r.read(), announcedActivityWallMs: try r.read(), motionSeq: try r.read(),
                  timerWallMs: try r.read())
    }
}
