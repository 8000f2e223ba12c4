import FoundationEssentials

/// Where JSON text first breaks: FoundationEssentials' decoder says only
/// that data is not valid JSON. A syntax check alone, no values built:
/// RFC 8259 in UTF-8 (a byte-order mark allowed, as the decoder allows it),
/// numbers within a Double's range, surrogates in pairs, nesting as deep
/// as the decoder takes.
public struct JSONSyntax {
    public struct Problem: Error, Equatable {
        /// The byte the text breaks at (its length for a text cut short).
        public var offset: Int
        public var message: String

        public init(offset: Int, message: String) { self.offset = offset; self.message = message }
    }

    private let bytes: [UInt8]
    private var index = 0
    /// The decoder's own limit.
    private static let maxDepth = 512

    /// The first problem in `bytes`, or nil if they are one valid JSON value.
    public static func firstProblem(in bytes: some Collection<UInt8>) -> Problem? {
        var scanner = JSONSyntax(bytes: Array(bytes))
        if scanner.bytes.starts(with: [0xEF, 0xBB, 0xBF]) { scanner.index = 3 }
        do {
            try scanner.value(depth: 0)
            scanner.skipSpace()
            if scanner.index < scanner.bytes.count { throw scanner.problem("unexpected text after the value") }
            return nil
        } catch {
            return error as? Problem
        }
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private func problem(_ message: String) -> Problem { Problem(offset: index, message: message) }

    private var next: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipSpace() {
        while let byte = next, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
    }

    private mutating func expect(_ byte: UInt8, _ message: String) throws {
        skipSpace()
        guard next == byte else { throw problem(next == nil ? "unexpected end of file" : message) }
        index += 1
    }

    private mutating func value(depth: Int) throws {
        skipSpace()
        guard let byte = next else { throw problem("unexpected end of file") }
        switch byte {
        case UInt8(ascii: "{"):
            try members(closedBy: UInt8(ascii: "}"), depth: depth) { scanner in
                scanner.skipSpace()
                guard scanner.next == UInt8(ascii: "\"") else {
                    throw scanner.problem(scanner.next == nil ? "unexpected end of file" : "expected a quoted key")
                }
                try scanner.string()
                try scanner.expect(UInt8(ascii: ":"), "expected ':' after the key")
                try scanner.value(depth: depth + 1)
            }
        case UInt8(ascii: "["):
            try members(closedBy: UInt8(ascii: "]"), depth: depth) { try $0.value(depth: depth + 1) }
        case UInt8(ascii: "\""): try string()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
        default: throw problem("invalid value")
        }
    }

    /// An object or an array, from its opening bracket: `member` read
    /// again after each comma, until `close`.
    private mutating func members(closedBy close: UInt8, depth: Int, _ member: (inout JSONSyntax) throws -> Void) throws {
        guard depth < Self.maxDepth else { throw problem("nested too deeply") }
        index += 1
        skipSpace()
        if next == close { index += 1; return }
        while true {
            try member(&self)
            skipSpace()
            guard let byte = next else { throw problem("unexpected end of file") }
            if byte == close { index += 1; return }
            guard byte == UInt8(ascii: ",") else { throw problem("expected ',' or '\(Character(Unicode.Scalar(close)))'") }
            index += 1
        }
    }

    private mutating func string() throws {
        index += 1
        while let byte = next {
            switch byte {
            case UInt8(ascii: "\""): index += 1; return
            case UInt8(ascii: "\\"):
                index += 1
                guard let escaped = next else { break }
                if escaped == UInt8(ascii: "u") {
                    let start = index - 1
                    let unit = try hexUnit()
                    if (0xDC00...0xDFFF).contains(unit) { index = start; throw problem("a lone low surrogate") }
                    if (0xD800...0xDBFF).contains(unit) {
                        guard next == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                            index = start; throw problem("a high surrogate without its low one")
                        }
                        index += 1
                        guard (0xDC00...0xDFFF).contains(try hexUnit()) else { index = start; throw problem("a high surrogate without its low one") }
                    }
                } else if "\"\\/bfnrt".utf8.contains(escaped) {
                    index += 1
                } else {
                    throw problem("invalid escape")
                }
            case 0..<0x20: throw problem("a control character in a string (a line break must be written \\n)")
            case 0x80...: try utf8Sequence()
            default: index += 1
            }
        }
        throw problem("unterminated string")
    }

    /// The four hex digits after `\u` (at `u` now), as a UTF-16 unit; after them.
    private mutating func hexUnit() throws -> UInt16 {
        var unit: UInt16 = 0
        for _ in 0..<4 {
            index += 1
            guard let hex = next, let digit = hexValue(hex) else { throw problem("invalid \\u escape") }
            unit = unit << 4 | UInt16(digit)
        }
        index += 1
        return unit
    }

    private func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// One well-formed UTF-8 sequence of two to four bytes (RFC 3629: no
    /// overlong forms, no surrogates, nothing past U+10FFFF).
    private mutating func utf8Sequence() throws {
        let lead = bytes[index]
        let (length, secondRange): (Int, ClosedRange<UInt8>) = switch lead {
        case 0xC2...0xDF: (2, 0x80...0xBF)
        case 0xE0: (3, 0xA0...0xBF)
        case 0xE1...0xEC, 0xEE...0xEF: (3, 0x80...0xBF)
        case 0xED: (3, 0x80...0x9F)
        case 0xF0: (4, 0x90...0xBF)
        case 0xF1...0xF3: (4, 0x80...0xBF)
        case 0xF4: (4, 0x80...0x8F)
        default: throw problem("invalid UTF-8")
        }
        for offset in 1..<length {
            let at = index + offset
            guard at < bytes.count, (offset == 1 ? secondRange : 0x80...0xBF).contains(bytes[at]) else { throw problem("invalid UTF-8") }
        }
        index += length
    }

    private mutating func literal(_ word: String) throws {
        for expected in word.utf8 {
            guard next == expected else { throw problem("invalid value") }
            index += 1
        }
    }

    private mutating func number() throws {
        let start = index
        if next == UInt8(ascii: "-") { index += 1 }
        guard let first = next, isDigit(first) else { throw problem("invalid number") }
        index += 1
        if first != UInt8(ascii: "0") { skipDigits() }
        if next == UInt8(ascii: ".") {
            index += 1
            guard let digit = next, isDigit(digit) else { throw problem("invalid number") }
            skipDigits()
        }
        if next == UInt8(ascii: "e") || next == UInt8(ascii: "E") {
            index += 1
            if next == UInt8(ascii: "+") || next == UInt8(ascii: "-") { index += 1 }
            guard let digit = next, isDigit(digit) else { throw problem("invalid number") }
            skipDigits()
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(text), value.isFinite else { index = start; throw problem("number out of range") }
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    private mutating func skipDigits() { while let byte = next, isDigit(byte) { index += 1 } }
}
