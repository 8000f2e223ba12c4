import FoundationEssentials
import Glibc
import Runtime

exit(await ServiceRunner.run(name: "track") { _, reader in
    TrackService.definition(try TrackSettings(reader))
})
