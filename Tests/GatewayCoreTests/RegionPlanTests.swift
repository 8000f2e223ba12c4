import GatewayCore
import Testing

@Suite struct RegionPlanTests {
    let home = OwnTracksRegion(name: "Home", latitude: 48.1, longitude: 11.5, radiusM: 100, regionID: "h1")
    let gym = OwnTracksRegion(name: "Gym", latitude: 48.2, longitude: 11.6, radiusM: 50, createdS: 1_700_000_000)
    let beacon = OwnTracksRegion(name: "Desk", regionID: "b1")

    @Test func aRegionIsKnownByItsRidThenItsTstThenItsName() {
        #expect(home.key == "h1" && gym.key == "1700000000" && OwnTracksRegion(name: "Shop").key == "Shop")
        #expect(RegionPlan.fenceID("a/b\nc ") == "ot-a_b_c")
    }

    @Test func oneWaypointAddsOrChangesOnlyItself() {
        let kept = ["h1": home]
        #expect(RegionPlan(kept: kept, incoming: [home], replacing: false) == RegionPlan())
        var renamed = home; renamed.name = "Home sweet home"
        #expect(RegionPlan(kept: kept, incoming: [renamed], replacing: false) == RegionPlan(save: [renamed]))
        var moved = home; moved.radiusM = 150
        #expect(RegionPlan(kept: kept, incoming: [moved], replacing: false) == RegionPlan(save: [moved], arm: [moved]))
        #expect(RegionPlan(kept: kept, incoming: [gym], replacing: false) == RegionPlan(save: [gym], arm: [gym]))
        // A circle that became a beacon region is disarmed.
        var placeless = home; placeless.latitude = nil
        #expect(RegionPlan(kept: kept, incoming: [placeless], replacing: false) == RegionPlan(save: [placeless], disarm: ["ot-h1"]))
    }

    @Test func theAppsListReplacesWhatWasKept() {
        let plan = RegionPlan(kept: ["h1": home, "b1": beacon], incoming: [gym], replacing: true)
        #expect(plan == RegionPlan(save: [gym], delete: ["b1", "h1"], arm: [gym], disarm: ["ot-h1"]))
        #expect(plan.count(after: ["h1": home, "b1": beacon]) == 1)
        // A key twice in one list: the last wins, once.
        var later = gym; later.name = "Gym 2"
        #expect(RegionPlan(kept: [:], incoming: [gym, later], replacing: true) == RegionPlan(save: [later], arm: [later]))
        #expect(RegionPlan(kept: ["h1": home], incoming: [], replacing: true) == RegionPlan(delete: ["h1"], disarm: ["ot-h1"]))
    }
}
