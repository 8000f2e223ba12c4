import FoundationEssentials
import Glibc

/// An exclusive lock on a partition's store (`flock` on a file beside it):
/// the second fence after the MQTT session, so two instances never write
/// one store, whatever their views of the leases. The kernel drops it when
/// its process dies.
final class StoreLock: Sendable {
    private let fd: Int32

    /// Nil while another process holds it.
    init?(path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ConfigError("dataDir", "cannot open \(path): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            return nil
        }
        self.fd = fd
    }

    func release() {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
