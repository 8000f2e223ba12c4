import FoundationEssentials
import Glibc
import Runtime

exit(await ServiceRunner.run(name: "filter") { _, reader in
    FilterService.definition(try FilterSettings(reader))
})
