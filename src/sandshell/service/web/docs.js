// The API's docs: Swagger UI (shipped with the server, nothing from the network) on /openapi.json.
"use strict";
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  persistAuthorization: false,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
