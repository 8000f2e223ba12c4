import FoundationEssentials
import Glibc
import Runtime

exit(await ServiceRunner.run(name: "gateway") { _, reader in
    GatewayService.definition(try GatewaySettings(reader))
})
