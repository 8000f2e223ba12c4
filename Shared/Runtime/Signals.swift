import Dispatch
import FoundationEssentials
import Glibc

/// Waits for SIGTERM or SIGINT.
public enum Signals {
    public static func waitForTermination() async -> Int32 {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { continuation.yield(signalNumber) }
            source.resume()
            sources.append(source)
        }
        var received: Int32 = SIGTERM
        for await signalNumber in stream { received = signalNumber; break }
        sources.forEach { $0.cancel() }
        return received
    }
}
