import Bus
import Model
import Store
import TrackerLog

/// A check a partitioned service's ingress makes before it forwards a
/// message, on state no partition has: the ingress sees every message
/// that comes to the service, so what must hold across the fleet is
/// decided here (the gateway's limit of OwnTracks devices per account).
/// Its store (`tracker-{service}-in.sqlite`) moves with the ingress, under
/// a file lock like a partition's. Confined to the ingress's network thread.
public protocol IngressGate: AnyObject {
    /// Nil to forward `message`; else why it is refused, and for which device.
    func check(_ message: MQTTMessage) -> IngressRefusal?
    /// Takes in what a partition's store holds of the gate's state (when
    /// stores are repartitioned, from an unpartitioned one above all).
    func absorb(partitionStore: Database) throws
}

/// A message the ingress does not forward: the device is told once by an
/// `error` event with the refusal's code (`announce`), and it is counted.
public struct IngressRefusal: Sendable {
    public let device: DeviceID
    public let refusal: InputRefusal
    public init(device: DeviceID, refusal: InputRefusal) { self.device = device; self.refusal = refusal }
}

/// What a service's gate is opened with.
public struct IngressGateContext {
    /// The ingress's own store.
    public let db: Database
    public let topics: Topics
    public let logger: Logger
}
