import FoundationEssentials
import Glibc
import Model

/// A fence with what checking a point against it needs, computed once.
public final class IndexedFence: Sendable {
    public let fence: Geofence
    /// Its key among a device's visits (see `Geofencing.key`), made once.
    let visitKey: String
    /// Metres per degree of longitude at the fence's latitude.
    let metresPerDegLon: Double

    init(_ fence: Geofence, fleet: Bool) {
        self.fence = fence
        visitKey = Geofencing.key(fence.id, fleet: fleet)
        metresPerDegLon = LocalFrame.metresPerDegLat * cos(fence.latitude * .pi / 180)
    }

    /// The point in metres east/north of the centre (flat: fences are at most
    /// tens of kilometres across, where the error is centimetres).
    @inline(__always)
    func local(_ latitude: Double, _ longitude: Double) -> (x: Double, y: Double) {
        var dLon = longitude - fence.longitude
        if dLon > 180 { dLon -= 360 } else if dLon < -180 { dLon += 360 }
        return (dLon * metresPerDegLon, (latitude - fence.latitude) * LocalFrame.metresPerDegLat)
    }

    @inline(__always)
    func distance(_ latitude: Double, _ longitude: Double) -> Double {
        let (x, y) = local(latitude, longitude)
        return (x * x + y * y).squareRoot()
    }
}

/// One owner's fences (a device's, or the fleet's) on a grid of cells about
/// a kilometre square, so a point is checked against the fences near it, not
/// against every fence: with a thousand fences a point looks at a handful.
/// Not thread-safe: owned by the service's network thread.
public final class FenceIndex {
    public private(set) var fences: [IndexedFence] = []
    private var slotByID: [String: Int] = [:]
    private var cells: [Int64: [Int32]] = [:]
    /// Fences too big for the grid (over 64 cells): checked every time.
    private var large: [Int32] = []
    /// Per-query de-duplication (a fence sits in several cells).
    private var stamps: [UInt32] = []
    private var generation: UInt32 = 0

    static let cellDegrees = 0.01
    static let maxCellsPerFence = 64

    /// Whether these are the fleet's fences (their visits are keyed apart).
    public let isFleet: Bool

    public init(_ fences: [Geofence] = [], fleet: Bool = false) {
        isFleet = fleet
        for fence in fences { insert(fence) }
    }

    public var count: Int { fences.count }
    public func fence(_ id: String) -> IndexedFence? { slotByID[id].map { fences[$0] } }

    /// Adds a fence, replacing one with the same id.
    public func upsert(_ fence: Geofence) {
        if slotByID[fence.id] != nil { remove(fence.id) }
        insert(fence)
    }

    public func remove(_ id: String) {
        guard slotByID[id] != nil else { return }
        let kept = fences.map(\.fence).filter { $0.id != id }
        fences = []; slotByID = [:]; cells = [:]; large = []; stamps = []
        for fence in kept { insert(fence) }
    }

    private func insert(_ fence: Geofence) {
        let indexed = IndexedFence(fence, fleet: isFleet)
        let slot = Int32(fences.count)
        slotByID[fence.id] = fences.count
        fences.append(indexed)
        stamps.append(0)
        let dLat = fence.radiusM / LocalFrame.metresPerDegLat
        let dLon = fence.radiusM / max(indexed.metresPerDegLon, 1)
        let (lat0, lat1) = (Self.cell(fence.latitude - dLat), Self.cell(fence.latitude + dLat))
        let (lon0, lon1) = (Self.cell(fence.longitude - dLon), Self.cell(fence.longitude + dLon))
        guard (lat1 - lat0 + 1) * (lon1 - lon0 + 1) <= Self.maxCellsPerFence else { large.append(slot); return }
        for a in lat0...lat1 { for o in lon0...lon1 { cells[Self.key(a, o), default: []].append(slot) } }
    }

    @inline(__always) static func cell(_ degrees: Double) -> Int32 { Int32((degrees / cellDegrees).rounded(.down)) }
    @inline(__always) static func key(_ lat: Int32, _ lon: Int32) -> Int64 { Int64(lat) << 32 | Int64(UInt32(bitPattern: lon)) }

    /// Calls `body` once for every fence that could contain a point of the
    /// box spanned by the two positions (one, when they are equal).
    @inline(__always)
    public func forEachCandidate(_ aLat: Double, _ aLon: Double, _ bLat: Double, _ bLon: Double,
                                 _ body: (IndexedFence) -> Void) {
        guard !fences.isEmpty else { return }
        generation &+= 1
        if generation == 0 { stamps = Array(repeating: 0, count: fences.count); generation = 1 }
        for slot in large { stamps[Int(slot)] = generation; body(fences[Int(slot)]) }
        let (lat0, lat1) = (Self.cell(min(aLat, bLat)), Self.cell(max(aLat, bLat)))
        let (lon0, lon1) = (Self.cell(min(aLon, bLon)), Self.cell(max(aLon, bLon)))
        if (lat1 - lat0 + 1) * (lon1 - lon0 + 1) <= 16 {
            for a in lat0...lat1 { for o in lon0...lon1 { visit(Self.key(a, o), body) } }
        } else {
            // A jump across a region is no passage through hundreds of cells: its ends only.
            visit(Self.key(Self.cell(aLat), Self.cell(aLon)), body)
            visit(Self.key(Self.cell(bLat), Self.cell(bLon)), body)
        }
    }

    @inline(__always)
    private func visit(_ key: Int64, _ body: (IndexedFence) -> Void) {
        guard let slots = cells[key] else { return }
        for slot in slots where stamps[Int(slot)] != generation {
            stamps[Int(slot)] = generation
            body(fences[Int(slot)])
        }
    }
}
