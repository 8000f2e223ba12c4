import FoundationEssentials
import Glibc

/// Distances on the WGS-84 sphere approximation, and a local metric frame.
public enum Geodesy {
    public static let earthRadiusM = 6_371_008.8

    /// Great-circle distance in metres (haversine).
    public static func distance(_ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double) -> Double {
        let φ1 = lat1 * .pi / 180, φ2 = lat2 * .pi / 180
        let dφ = φ2 - φ1, dλ = (lon2 - lon1) * .pi / 180
        let a = sin(dφ / 2) * sin(dφ / 2) + cos(φ1) * cos(φ2) * sin(dλ / 2) * sin(dλ / 2)
        return 2 * earthRadiusM * asin(min(1, sqrt(a)))
    }

    /// East and north components of a speed along a course (degrees clockwise from north).
    public static func velocity(speed: Double, courseDeg: Double) -> (east: Double, north: Double) {
        let radians = courseDeg * .pi / 180
        return (speed * sin(radians), speed * cos(radians))
    }

    /// Sum of the legs of a path of (lat, lon) pairs.
    public static func pathLength(_ points: [(lat: Double, lon: Double)]) -> Double {
        zip(points, points.dropFirst()).reduce(0) { $0 + distance($1.0.lat, $1.0.lon, $1.1.lat, $1.1.lon) }
    }
}

/// An equirectangular frame around an origin: metres east/north. Accurate to
/// well under a centimetre per kilometre near the origin, which is all a
/// per-fix filter needs; the origin moves with the device.
public struct LocalFrame: Sendable, Equatable, Codable {
    public var originLat: Double
    public var originLon: Double
    private var metresPerDegLon: Double

    public static let metresPerDegLat = Geodesy.earthRadiusM * .pi / 180

    public init(originLat: Double, originLon: Double) {
        self.originLat = originLat
        self.originLon = originLon
        self.metresPerDegLon = Self.metresPerDegLat * cos(originLat * .pi / 180)
    }

    public func toLocal(lat: Double, lon: Double) -> (x: Double, y: Double) {
        var dLon = lon - originLon
        if dLon > 180 { dLon -= 360 } else if dLon < -180 { dLon += 360 }
        return (dLon * metresPerDegLon, (lat - originLat) * Self.metresPerDegLat)
    }

    public func toGeo(x: Double, y: Double) -> (lat: Double, lon: Double) {
        var lon = originLon + x / metresPerDegLon
        if lon > 180 { lon -= 360 } else if lon < -180 { lon += 360 }
        return (originLat + y / Self.metresPerDegLat, lon)
    }
}

// Here, beside the private scale it stores.
extension LocalFrame: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(originLat, originLon, metresPerDegLon) }
    public init(from r: inout BinaryReader) throws {
        self.init(originLat: try r.read(), originLon: try r.read())
        metresPerDegLon = try r.read()
    }
}
