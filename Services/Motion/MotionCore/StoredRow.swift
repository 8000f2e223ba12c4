import Model

// The binary form of motion's state (`BinaryCoding`), fields in declaration
// order; the service's row (Motion/StoredRow.swift) says the format version.

extension Spot: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(timeMs, latitude, longitude, speedMps) }
    public init(from r: inout BinaryReader) throws {
        self.init(timeMs: try r.read(), latitude: try r.read(), longitude: try r.read(), speedMps: try r.read())
    }
}

extension FenceVisit: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(enteredMs, dwellDueMs, lastInside, beyond) }
    public init(from r: inout BinaryReader) throws {
        enteredMs = try r.read(); dwellDueMs = try r.read(); lastInside = try r.read(); beyond = try r.read()
    }
}

extension Anchor: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(latitude, longitude, timeMs, count, sumLatitude, sumLongitude) }
    public init(from r: inout BinaryReader) throws {
        latitude = try r.read(); longitude = try r.read(); timeMs = try r.read(); count = try r.read()
        sumLatitude = try r.read(); sumLongitude = try r.read()
    }
}

extension MotionRow: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(state, anchor, lastPoint, leavingSinceMs, trip, stop, activity) }
    public init(from r: inout BinaryReader) throws {
        state = try r.read(); anchor = try r.read(); lastPoint = try r.read(); leavingSinceMs = try r.read()
        trip = try r.read(); stop = try r.read(); activity = try r.read()
    }
}

extension RouteProgress: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(offRoute, run, segment) }
    public init(from r: inout BinaryReader) throws {
        offRoute = try r.read(); run = try r.read(); segment = try r.read()
    }
}
