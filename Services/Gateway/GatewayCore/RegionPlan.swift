import FoundationEssentials
import Model

/// What one of the app's `waypoint` or `waypoints` messages changes in the
/// regions kept for its device, worked out from what is kept: the rows to
/// write and delete, and the Tracker geofences to arm and disarm. A value;
/// the gateway carries it out.
public struct RegionPlan: Equatable, Sendable {
    /// New or changed regions, to store.
    public var save: [OwnTracksRegion] = []
    /// Keys of regions the app no longer has (a `waypoints` list without them).
    public var delete: [String] = []
    /// Circles to arm (or re-arm, changed) as geofences.
    public var arm: [OwnTracksRegion] = []
    /// Fence ids to remove: regions deleted, or no longer a circle.
    public var disarm: [String] = []

    public init(save: [OwnTracksRegion] = [], delete: [String] = [], arm: [OwnTracksRegion] = [], disarm: [String] = []) {
        self.save = save; self.delete = delete; self.arm = arm; self.disarm = disarm
    }

    /// The fence id of an app's region: `ot-` and its key, with what a fence id may not hold replaced.
    public static func fenceID(_ key: String) -> String {
        let safe = key.map { $0 == "/" || $0.isNewline ? "_" : $0 }
        return "ot-" + String(safe).trimmingSpaces()
    }

    /// - Parameters:
    ///   - kept: the regions stored for the device, by key.
    ///   - incoming: what the message says (a list: the last of a key wins).
    ///   - replacing: the app's whole list (`waypoints`): anything kept and not in it goes.
    public init(kept: [String: OwnTracksRegion], incoming: [OwnTracksRegion], replacing: Bool) {
        var latest: [String: OwnTracksRegion] = [:]
        var order: [String] = []
        for region in incoming {
            if latest.updateValue(region, forKey: region.key) == nil { order.append(region.key) }
        }
        for key in order {
            guard let region = latest[key], kept[key] != region else { continue }
            save.append(region)
            if let circle = region.circle {
                // Re-arming restarts a visit: only when the circle itself changed (not a rename).
                if kept[key]?.circle.map({ $0 != circle }) ?? true { arm.append(region) }
            } else if kept[key]?.circle != nil {
                disarm.append(Self.fenceID(key))
            }
        }
        guard replacing else { return }
        for key in kept.keys.sorted() where latest[key] == nil {
            delete.append(key)
            if kept[key]?.circle != nil { disarm.append(Self.fenceID(key)) }
        }
    }

    /// How many regions the device keeps once this is carried out.
    public func count(after kept: [String: OwnTracksRegion]) -> Int {
        Set(kept.keys).subtracting(delete).union(save.map(\.key)).count
    }
}
