import FoundationEssentials
import MotionCore
import Runtime

/// The motion service's settings, read from `config/motion.json` and the environment.
struct MotionSettings {
    var rules: MotionRules
    var geofenceRules: GeofenceRules
    var routeRules: RouteRules
    var stopOnStationary: Bool
    /// Heartbeat while stationary; nil when off (0).
    var heartbeatIntervalMs: Int64?
    /// The least time between two `activityChange` events of a device (wall clock).
    var activityChangeIntervalMs: Int64
    var maxGeofencesPerDevice: Int
    var maxFleetGeofences: Int
    /// Smaller fences are armed, with a `diagnostic`: a phone's fix is often less precise.
    var minReliableRadiusM: Double
    var maxRadiusM: Double
    var maxRoutePoints: Int
    var retentionPerDevice: Int
    var retentionTotal: Int
    /// Crossings, trips and stops each keep this many a device, and `historyTotal` across devices.
    var historyPerDevice: Int
    var historyTotal: Int
    /// Crossings, trips and stops older than this (before the device's newest point) are deleted.
    var historyRetentionMs: Int64

    init(_ reader: SettingsReader) throws {
        var rules = MotionRules()
        // Whole minutes; an older config's `stopTimeoutSec` still decodes, rounded up.
        let minutes: Int
        if let seconds = try reader.optionalDouble("stopTimeoutSec", in: 1...86_400), try reader.optionalDouble("stopTimeoutMin", in: 1...1_440) == nil {
            minutes = Int((seconds / 60).rounded(.up))
        } else {
            minutes = try reader.int("stopTimeoutMin", default: 5, in: 1...1_440)
        }
        rules.stopTimeoutMs = Int64(minutes) * 60_000
        rules.stopPendingAfterMs = min(rules.stopPendingAfterMs, rules.stopTimeoutMs)
        rules.motionTriggerDelayMs = Int64(try reader.double("motionTriggerDelaySec", default: 0, in: 0...3_600) * 1000)
        rules.stationaryRadiusM = try reader.double("stationaryRadiusM", default: 25, in: 5...1_000)
        rules.disableStopDetection = try reader.bool("disableStopDetection", default: false)
        rules.activityRecognition = try reader.bool("activityRecognition", default: true)
        rules.activityConfidenceMin = try reader.int("activityConfidenceMin", default: 66, in: 0...100)
        rules.snapshotConfidenceMin = try reader.int("snapshotConfidenceMin", default: 50, in: 0...100)
        rules.stillConfidenceMin = try reader.int("stillConfidenceMin", default: 100, in: 0...100)
        do { self.rules = try rules.validated() } catch { throw ConfigError("stillConfidenceMin", "\(error)") }
        geofenceRules = GeofenceRules()
        geofenceRules.minHysteresisM = try reader.double("geofenceHysteresisM", default: 5, in: 0...1_000)
        routeRules = RouteRules()
        routeRules.corridorM = try reader.double("routeCorridorM", default: 50, in: 5...10_000)
        routeRules.offAfter = try reader.int("offRouteAfter", default: 3, in: 1...100)
        routeRules.onAfter = try reader.int("onRouteAfter", default: 2, in: 1...100)
        stopOnStationary = try reader.bool("stopOnStationary", default: false)
        let heartbeat = try reader.double("heartbeatIntervalMin", default: 15, in: 0...1_440)
        heartbeatIntervalMs = heartbeat > 0 ? Int64(heartbeat * 60_000) : nil
        activityChangeIntervalMs = Int64(try reader.double("activityChangeIntervalSec", default: 10, in: 0...3_600) * 1000)
        maxGeofencesPerDevice = try reader.int("maxGeofencesPerDevice", default: 1_000, in: 1...100_000)
        maxFleetGeofences = try reader.int("maxFleetGeofences", default: 10_000, in: 1...1_000_000)
        minReliableRadiusM = try reader.double("minReliableRadiusM", default: 100, in: 0...10_000)
        maxRadiusM = try reader.double("maxGeofenceRadiusM", default: 100_000, in: 1...1_000_000)
        maxRoutePoints = try reader.int("maxRoutePoints", default: 10_000, in: 2...1_000_000)
        retentionPerDevice = try reader.int("retentionPerDevice", default: 10_000, in: 100...10_000_000)
        retentionTotal = try reader.int("retentionTotal", default: 5_000_000, in: 1_000...1_000_000_000)
        historyPerDevice = try reader.int("historyPerDevice", default: 10_000, in: 10...10_000_000)
        historyTotal = try reader.int("historyTotal", default: 1_000_000, in: 1_000...1_000_000_000)
        historyRetentionMs = Int64(try reader.double("historyRetentionDays", default: 90, in: 1...3_650) * 86_400_000)
    }
}
