@testable import MotionCore
import Model
import Testing

@Suite struct RouteTests {
    /// A progress kept from a longer route (or read from a damaged row)
    /// names a segment past this one's end: the nearest segment is found
    /// all the same, instead of a window whose lower end passed its upper.
    @Test(arguments: [-100, 0, 3, 500])
    func aProgressPastTheRoutesEndStillFindsTheNearestSegment(_ near: Int) {
        let route = ActiveRoute((0..<5).map { (latitude: 48.1 + Double($0) * 0.001, longitude: 11.5) })
        let (metres, segment) = route.distance(48.1035, 11.5, near: near)
        #expect(metres < 1)
        #expect(segment == 3)
    }
}
