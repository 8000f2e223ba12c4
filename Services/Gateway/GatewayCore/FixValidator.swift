import Model

/// The gateway's rules for a single fix. Time is passed in; nothing here reads a clock.
public struct FixValidator: Sendable, Equatable {
    public enum MockPolicy: String, Sendable, CaseIterable {
        /// Pass mock fixes on, flagged `mock: true`.
        case accept
        /// Refuse them with a `badInput` error.
        case reject
    }

    /// How far ahead of the wall clock a fix may be stamped.
    public var maxFutureMs: Int64
    /// If set, fixes older than this (against the wall clock) are refused.
    /// Off by default so recordings replay with their own times.
    public var stalenessCeilingMs: Int64?
    public var mockPolicy: MockPolicy
    public var maxPayloadBytes: Int

    /// 2000-01-01: anything earlier is a broken clock or a unit mistake.
    public static let earliestMs: Int64 = 946_684_800_000
    public static let maxSpeedMps = 1_000.0

    public init(maxFutureMs: Int64 = 10 * 60_000, stalenessCeilingMs: Int64? = nil,
                mockPolicy: MockPolicy = .accept, maxPayloadBytes: Int = 256 * 1024) {
        self.maxFutureMs = maxFutureMs
        self.stalenessCeilingMs = stalenessCeilingMs
        self.mockPolicy = mockPolicy
        self.maxPayloadBytes = maxPayloadBytes
    }

    func checkSize(_ payload: [UInt8]) -> InputProblem? {
        guard payload.count > maxPayloadBytes else { return nil }
        return InputProblem("payload: \(payload.count) bytes is over the \(maxPayloadBytes)-byte limit")
    }

    public func validate(_ fix: DeviceFix, source: FixSource, nowMs: Int64) -> Result<NormalizedFix, InputProblem> {
        let timeField = source == .ownTracks ? "tst" : "t"
        guard fix.t.isFinite else { return .failure(InputProblem("\(timeField): not a finite number")) }
        if fix.t > 1e11 {
            return .failure(InputProblem("\(timeField): \(fix.t) looks like milliseconds; send seconds since 1970"))
        }
        let timeMs = fix.timeMs
        guard timeMs >= Self.earliestMs else {
            return .failure(InputProblem("\(timeField): \(fix.t) is before 2000-01-01; send seconds since 1970"))
        }
        if timeMs - nowMs > maxFutureMs {
            return .failure(InputProblem("\(timeField): \((timeMs - nowMs) / 1000) s in the future, over the \(maxFutureMs / 1000) s limit"))
        }
        if let ceiling = stalenessCeilingMs, nowMs - timeMs > ceiling {
            return .failure(InputProblem("\(timeField): \((nowMs - timeMs) / 1000) s old, over the staleness ceiling of \(ceiling / 1000) s"))
        }
        guard fix.lat.isFinite, (-90...90).contains(fix.lat) else {
            return .failure(InputProblem("lat: \(fix.lat) is outside -90…90"))
        }
        guard fix.lon.isFinite, (-180...180).contains(fix.lon) else {
            return .failure(InputProblem("lon: \(fix.lon) is outside -180…180"))
        }
        guard fix.acc.isFinite else { return .failure(InputProblem("acc: not a finite number")) }
        guard fix.acc >= 0 else { return .failure(InputProblem("acc: \(fix.acc) is negative, which marks the fix invalid")) }
        var speed = fix.speed
        if let s = speed {
            guard s.isFinite, s <= Self.maxSpeedMps else {
                return .failure(InputProblem("speed: \(s) m/s is beyond \(Int(Self.maxSpeedMps)) m/s"))
            }
            if s < 0 { speed = nil }  // the platforms' "unknown"
        }
        var course = fix.course
        if let c = course {
            guard c.isFinite, c <= 360 else { return .failure(InputProblem("course: \(c) is outside 0…360")) }
            if c < 0 { course = nil }
        }
        if let alt = fix.alt, !(alt.isFinite && (-12_000...100_000).contains(alt)) {
            return .failure(InputProblem("alt: \(alt) m is outside -12000…100000"))
        }
        var vacc = fix.vacc
        if let v = vacc {
            guard v.isFinite else { return .failure(InputProblem("vacc: not a finite number")) }
            if v < 0 { vacc = nil }
        }
        if let battery = fix.batt, !(battery.isFinite && (0...100).contains(battery)) {
            return .failure(InputProblem("batt: \(battery) is outside 0…100"))
        }
        if fix.mock == true, mockPolicy == .reject {
            return .failure(InputProblem("mock: simulated fixes are refused by the gateway's mockPolicy"))
        }
        return .success(NormalizedFix(timeMs: timeMs, reading: Reading(latitude: fix.lat, longitude: fix.lon, accuracyM: fix.acc,
                                                                       speedMps: speed, courseDeg: course), altitudeM: fix.alt,
                                      verticalAccuracyM: vacc, mock: fix.mock == true ? true : nil,
                                      batteryPct: fix.batt, source: source))
    }
}
