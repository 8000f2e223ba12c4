import FoundationEssentials
import Model

/// The filter's row as it is stored: a compact binary form (`BinaryCoding`),
/// written with every batch that touched the device. Rows saved as JSON by
/// earlier releases still read (`SavedState.swift`) and are written back in
/// this form.
///
/// Layout: the magic byte, the format version, then what survives any
/// version (the newest fix's time, the odometer), then the row. A version
/// this release does not know restarts the filter from those two, as an
/// unreadable JSON state does. A field added to any type below is written
/// at the end of its type's fields, and the version goes up with a reader
/// for the old order (`StoredRowTests` lists every type's fields, so a field
/// added without that fails there).
extension FilterRow {
    /// First byte of the binary form; a JSON row starts with `{`.
    static let binaryMagic: UInt8 = 0xF1
    /// The version this release writes. 2: an outlier keeps whether it had
    /// Doppler. 3: the accuracy's calibration, and a fix's accuracy scale.
    public static let binaryVersion: UInt64 = 3
    /// The versions this release reads.
    static let readableVersions: ClosedRange<UInt64> = 1...binaryVersion

    public var stored: [UInt8] {
        var w = BinaryWriter(capacity: 4_096)
        w.byte(Self.binaryMagic)
        w.varint(Self.binaryVersion)
        w.write(state.ordering.newestMs, state.odometer.meters)
        w.write(rejections, arrivedMs, state)
        return w.written
    }

    /// A stored row, binary or JSON. Its state is read in any version it was
    /// saved in; one that no version reads restarts the filter but keeps the
    /// odometer and the newest fix's time (`restarted` says so).
    public static func restored(from data: Data, using decoder: JSONDecoder) throws -> (row: FilterRow, restarted: Bool) {
        guard data.first == binaryMagic else { return try restored(json: data, using: decoder) }
        var r = BinaryReader(Array(data), from: 1)
        let version = try r.varint()
        let newestMs: Int64? = try r.read(), meters: Double = try r.read()
        guard readableVersions.contains(version) else {
            var state = DeviceFilterState()
            state.ordering.newestMs = newestMs
            state.odometer.meters = meters
            return (FilterRow(state: state), true)
        }
        r.formatVersion = version
        var row = FilterRow(rejections: try r.read())
        row.arrivedMs = try r.read()
        row.state = try r.read()
        guard r.isAtEnd else { throw BinaryReader.Malformed("the filter row has bytes left after it") }
        return (row, false)
    }

    static func restored(json data: Data, using decoder: JSONDecoder) throws -> (row: FilterRow, restarted: Bool) {
        struct Stored: Decodable { var state: JSONValue; var rejections: Int?; var arrivedMs: Int64? }
        let stored = try decoder.decode(Stored.self, from: data)
        let (state, restarted) = DeviceFilterState.restored(from: JSONCoding.encode(stored.state), using: decoder)
        var row = FilterRow(state: state, rejections: stored.rejections ?? 0)
        row.arrivedMs = stored.arrivedMs
        return (row, restarted)
    }
}

extension DeviceFilterState: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(kalman, ordering, stop, lookAhead, smoothing, odometer) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (kalman, ordering, stop, lookAhead, smoothing, odometer) = (try r.read(), try r.read(), try r.read(), try r.read(), try r.read(), try r.read())
    }
}

extension KalmanState: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(phase, noise, outliers, calibration) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (phase, noise, outliers) = (try r.read(), try r.read(), try r.read())
        // Versions 1 and 2 had none: nothing learned yet.
        if r.formatVersion >= 3 { calibration = try r.read() }
    }
}

extension AccuracyCalibration: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(reportedM, run, logScaleSquared, weight) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (reportedM, run, logScaleSquared, weight) = (try r.read(), try r.read(), try r.read(), try r.read())
    }
}

extension KalmanState.Phase: BinaryStorable {
    public func write(to w: inout BinaryWriter) {
        switch self {
        case .notStarted: w.byte(0)
        case .lost(let frame): w.byte(1); w.write(frame)
        case .tracking(let track): w.byte(2); w.write(track)
        }
    }
    public init(from r: inout BinaryReader) throws {
        switch try r.byte() {
        case 0: self = .notStarted
        case 1: self = .lost(frame: try r.read())
        case 2: self = .tracking(filter: try r.read())
        case let tag: throw BinaryReader.Malformed("\(tag) is not a Kalman phase")
        }
    }
}

extension KalmanState.Track: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(frame, east, north, timeMs) }
    public init(from r: inout BinaryReader) throws {
        self.init(frame: try r.read(), east: try r.read(), north: try r.read(), timeMs: try r.read())
    }
}

extension NoiseCorrelation: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(products, squares, weight, lastEast, lastNorth, lastMs) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (products, squares, weight) = (try r.read(), try r.read(), try r.read())
        (lastEast, lastNorth, lastMs) = (try r.read(), try r.read(), try r.read())
    }
}

extension DeviceFilterState.OutlierFix: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(x, y, timeMs, accuracyM, doppler) }
    public init(from r: inout BinaryReader) throws {
        self.init(x: try r.read(), y: try r.read(), timeMs: try r.read(), accuracyM: try r.read())
        // Version 1 did not keep it.
        if r.formatVersion >= 2 { doppler = try r.read() }
    }
}

extension OrderingState: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(newestMs, reportIntervalMs, newestReceivedMs, previousPosition) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (newestMs, reportIntervalMs, newestReceivedMs, previousPosition) = (try r.read(), try r.read(), try r.read(), try r.read())
    }
}

extension DeviceFilterState.Position: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(latitude, longitude) }
    public init(from r: inout BinaryReader) throws { self.init(latitude: try r.read(), longitude: try r.read()) }
}

extension StopState: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(externalMotion, departedMs, anchor, leavingCount, trend, standingRun, standingMs) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (externalMotion, departedMs, anchor, leavingCount) = (try r.read(), try r.read(), try r.read(), try r.read())
        (trend, standingRun, standingMs) = (try r.read(), try r.read(), try r.read())
    }
}

extension DeviceFilterState.Anchor: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(x, y) }
    public init(from r: inout BinaryReader) throws { self.init(x: try r.read(), y: try r.read()) }
}

extension DeviceFilterState.StandingRun: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(count, sinceMs) }
    public init(from r: inout BinaryReader) throws { self.init(count: try r.read(), sinceMs: try r.read()) }
}

extension TrendWindows: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(windows) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        windows = try r.read()
    }
}

extension TrendWindow: BinaryStorable {
    public func write(to w: inout BinaryWriter) {
        w.write(tau, sw, swt, swtt, swx, swtx, swy, swty)
        w.write(svv, svvt, svvtt, lastMs, spanSec)
    }
    public init(from r: inout BinaryReader) throws {
        self.init(tau: try r.read())
        (sw, swt, swtt, swx, swtx, swy, swty) = (try r.read(), try r.read(), try r.read(), try r.read(), try r.read(), try r.read(), try r.read())
        (svv, svvt, svvtt, lastMs, spanSec) = (try r.read(), try r.read(), try r.read(), try r.read(), try r.read())
    }
}

extension LookAheadState: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(held, steady) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (held, steady) = (try r.read(), try r.read())
    }
}

extension SteadyTrack: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(east, north, timeMs, frame) }
    public init(from r: inout BinaryReader) throws {
        self.init(east: try r.read(), north: try r.read(), timeMs: try r.read(), frame: try r.read())
    }
}

extension FilterInput: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(seq, sessionID, timeMs, reading, receivedMs, accuracyScale) }
    public init(from r: inout BinaryReader) throws {
        seq = try r.read()
        sessionID = try r.read()
        timeMs = try r.read()
        reading = try r.read()
        receivedMs = try r.read()
        // Versions 1 and 2 had none: judged as reported.
        if r.formatVersion >= 3 { accuracyScale = try r.read() }
    }
}

extension SmoothingState: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(waiting) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        waiting = try r.read()
    }
}

extension Lagging: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(fix, verdict) }
    public init(from r: inout BinaryReader) throws { self.init(fix: try r.read(), verdict: try r.read()) }
}

extension Verdict: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(decision, point, rejection, step, standing) }
    public init(from r: inout BinaryReader) throws {
        self.init(decision: try r.read(), point: try r.read(), rejection: try r.read(), step: try r.read(), standing: try r.read())
    }
}

extension RejectReason: BinaryStorable {}

extension FilterStep: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(frame, priorTimeMs, timeMs, predictedEast, predictedNorth, east, north) }
    public init(from r: inout BinaryReader) throws {
        self.init(frame: try r.read(), priorTimeMs: try r.read(), timeMs: try r.read(), predictedEast: try r.read(),
                  predictedNorth: try r.read(), east: try r.read(), north: try r.read())
    }
}

extension OdometerState: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(lastPoint, meters) }
    public init(from r: inout BinaryReader) throws {
        self.init()
        (lastPoint, meters) = (try r.read(), try r.read())
    }
}

extension DeviceFilterState.AcceptedPoint: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(x, y, timeMs, accuracyM, ve, vn) }
    public init(from r: inout BinaryReader) throws {
        self.init(x: try r.read(), y: try r.read(), timeMs: try r.read(), accuracyM: try r.read(), ve: try r.read(), vn: try r.read())
    }
}
