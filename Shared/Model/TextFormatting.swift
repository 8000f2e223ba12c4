import FoundationEssentials
import Glibc

// What FoundationEssentials leaves to libFoundation (String(format:),
// trimmingCharacters), done here so that a service need not load
// libFoundation and ICU for a handful of calls.

extension Double {
    /// Fixed-point text with `decimals` digits after the point, as printf's
    /// `%.Nf` (`%+.Nf` with `sign`). The point is the C locale's: no
    /// service calls setlocale.
    public func fixed(_ decimals: Int, sign: Bool = false) -> String {
        let digits = Int32(min(max(decimals, 0), 20))
        // 309 digits for the largest double, a sign, a point and the decimals.
        var buffer = [CChar](repeating: 0, count: 336)
        _ = withVaList([digits, self]) { vsnprintf(&buffer, buffer.count, sign ? "%+.*f" : "%.*f", $0) }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// As JSON writes it, a whole number without its `.0` (`3600`, `0.5`), for messages.
    public var shortText: String {
        var text: [UInt8] = []
        JSONWriter.appendNumber(self, to: &text)
        return String(decoding: text, as: UTF8.self)
    }
}

extension StringProtocol {
    /// Without the spaces and tabs at either end (line breaks stay).
    public func trimmingSpaces() -> String { trimming { $0.isWhitespace && !$0.isNewline } }

    /// Without whitespace or line breaks at either end.
    public func trimmingWhitespace() -> String { trimming(\.isWhitespace) }

    private func trimming(_ isTrimmed: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !isTrimmed($0) }), let last = lastIndex(where: { !isTrimmed($0) }) else { return "" }
        return String(self[first...last])
    }
}

/// An error as a person reads it. FoundationEssentials' file errors print
/// as a structure on Linux; what they carry is a POSIX error, said here as
/// strerror says it ("No such file or directory").
public enum ErrorText {
    public static func describe(_ error: any Error) -> String {
        let posix = (error as? CocoaError)?.underlying as? POSIXError ?? error as? POSIXError
        if let posix { return String(cString: strerror(posix.code.rawValue)) }
        return "\(error)"
    }
}
