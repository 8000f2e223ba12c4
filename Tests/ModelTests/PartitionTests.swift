import Model
import Testing

@Suite struct PartitionTests {
    let topics = Topics()
    let sixteen = Partitioning(count: 16)

    /// The hash is part of every store's layout: a device must stay in its
    /// partition across releases and machines. These values pin it.
    @Test func aDevicesPartitionNeverChanges() {
        let pinned = ["van7": 15, "demo-van": 6, "a": 12, "jane@example.com": 12]
        for (id, k) in pinned { #expect(sixteen.partition(ofSegment: id) == k, "\(id)") }
        #expect(Partitioning(count: 1).partition(of: DeviceID("van7")!) == 0)
    }

    @Test func devicesSpreadOverThePartitions() {
        var counts = [Int](repeating: 0, count: 16)
        for n in 0..<16_000 { counts[sixteen.partition(of: DeviceID("device-\(n)")!)] += 1 }
        // 1,000 each on average; a fair hash keeps every partition within a fifth of it.
        #expect(counts.allSatisfy { (800...1_200).contains($0) }, "\(counts)")
    }

    @Test func aContractTopicMovesUnderItsPartitionAndBack() {
        let cases = ["tracker/van7/fixes", "tracker/van7/cmd/start", "tracker/_health/gateway", "owntracks/jane/phone",
                     "owntracks/jane/phone/event", "tracker/+/raw", "owntracks/+/+"]
        for topic in cases {
            let moved = topics.underPartition(5, topic)!
            #expect(moved.hasPrefix("tracker/_p/5/"), "\(moved)")
            #expect(topics.outsidePartition(moved) == topic)
            #expect(topics.partition(ofPartitionTopic: moved) == 5)
        }
        #expect(topics.underPartition(5, "elsewhere/van7") == nil)
        #expect(topics.outsidePartition("tracker/van7/fixes") == "tracker/van7/fixes")
    }

    @Test func aMessageBelongsToItsDevicesPartition() {
        let van = DeviceID("van7")!
        #expect(topics.partition(ofTopic: "tracker/van7/fixes", in: sixteen) == sixteen.partition(of: van))
        #expect(topics.partition(ofTopic: "tracker/van7/cmd/start", in: sixteen) == sixteen.partition(of: van))
        let phone = DeviceID.ownTracks(user: "jane", device: "phone")
        #expect(topics.partition(ofTopic: "owntracks/jane/phone/event", in: sixteen) == sixteen.partition(of: phone))
        #expect(topics.partition(ofTopic: "tracker/_fleet/cmd/addGeofence", in: sixteen) == sixteen.partition(of: .fleet))
        #expect(topics.partition(ofTopic: "tracker/_health/filter", in: sixteen) == nil)
    }

    /// A partitioned service publishes its streams and the commands it
    /// sends another under the device's partition; the contract's own
    /// topics (events, live frames) stay where they are.
    @Test func aPartitionedServiceSendsUnderTheDevicesPartition() {
        let van = DeviceID("van7")!
        let k = sixteen.partition(of: van)
        let inside = topics.partitioned(sixteen)
        #expect(inside.raw(van) == "tracker/_p/\(k)/van7/raw")
        #expect(inside.points(van) == "tracker/_p/\(k)/van7/points")
        #expect(inside.motion(van) == "tracker/_p/\(k)/van7/motion")
        #expect(inside.command(van, "repairRaw") == "tracker/_p/\(k)/van7/cmd/repairRaw")
        #expect(inside.events(van) == topics.events(van))
        #expect(inside.live(van) == topics.live(van))
        #expect(inside.fixes(van) == topics.fixes(van))
        #expect(topics.raw(van) == "tracker/van7/raw")
    }

    @Test func leaseAndInstanceHealthTopics() {
        #expect(topics.leaseSlot(topics.lease("filter", "7"), service: "filter") == "7")
        #expect(topics.leaseSlot(topics.lease("filter", "ingress"), service: "filter") == "ingress")
        #expect(topics.leaseSlot(topics.lease("filter", "7"), service: "motion") == nil)
        #expect(topics.healthInstance(topics.instanceHealth("filter", "filter-a"), service: "filter") == "filter-a")
        #expect(topics.healthInstance(topics.health("filter"), service: "filter") == nil)
    }
}
